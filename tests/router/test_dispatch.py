"""The /mcp fast path (router/http/dispatch.py): it serves /mcp without Starlette's stack, leaves
every other path to it, and still turns an unexpected failure into a JSON-RPC 500."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from router.http.dispatch import RouterApp, route_path, serve_guarded
from router.http.errors import INTERNAL_ERROR


async def _fast(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("fast")(scope, receive, send)


async def _routed(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"routed {request.url.path}")


def _app() -> RouterApp:
    return RouterApp(fast_path=("/mcp", _fast), routes=[Route("/mcp", _routed), Route("/other", _routed)])


async def _get(app: RouterApp, path: str, **kwargs: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, **kwargs)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.get(path)


async def test_mcp_takes_the_fast_path_and_other_paths_the_routes() -> None:
    app = _app()
    assert (await _get(app, "/mcp")).text == "fast"
    assert (await _get(app, "/other")).text == "routed /other"
    assert (await _get(app, "/mcp/")).status_code in (307, 404)  # not the exact path: Starlette's
    assert (await _get(app, "/nowhere")).status_code == 404


async def test_under_a_root_path_the_fast_path_matches_what_the_routes_would() -> None:
    assert route_path({"path": "/prefix/mcp", "root_path": "/prefix"}) == "/mcp"
    assert route_path({"path": "/prefixmcp", "root_path": "/prefix"}) == "/prefixmcp"
    assert route_path({"path": "/mcp", "root_path": ""}) == "/mcp"
    assert (await _get(_app(), "/prefix/mcp", root_path="/prefix")).text == "fast"


class Boom(Exception):
    pass


async def _collect(app: Any) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    with pytest.raises(Boom):
        await serve_guarded(app, {"type": "http", "method": "POST", "path": "/mcp"}, receive, send)
    return sent


async def test_a_failure_before_the_answer_is_a_json_rpc_500_and_is_raised_for_the_log() -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise Boom

    sent = await _collect(failing)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 500
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"] == b"application/json"
    body = json.loads(sent[1]["body"])
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == INTERNAL_ERROR
    assert int(headers[b"content-length"]) == len(sent[1]["body"])


async def test_a_failure_mid_answer_sends_no_second_head() -> None:
    async def half(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise Boom

    sent = await _collect(half)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 200
