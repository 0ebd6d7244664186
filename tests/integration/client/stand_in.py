"""A stand-in router for the typed client's tests: respx routes behind an httpx2 transport.

The `mcp` SDK speaks HTTP through httpx2, which respx does not patch; `RespxTransport` hands each
httpx2 request to a respx router as an httpx request and its answer back, so the stand-in is
written with respx's usual routes and side effects.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import httpx2
import respx

SESSION_NOT_FOUND = -32001
INTERNAL_ERROR = -32603
TOOLS = (
    "browser_navigate", "browser_snapshot", "browser_click", "browser_fill_form", "browser_take_screenshot",
    "browser_evaluate", "browser_console_messages", "browser_tabs", "get_content",
)

ToolAnswer = Callable[[httpx.Request, dict[str, Any]], httpx.Response | Awaitable[httpx.Response]]


class RespxTransport(httpx2.AsyncBaseTransport):
    def __init__(self, mock: respx.MockRouter) -> None:
        self.mock = mock

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers = list(request.headers.multi_items())
        asked = httpx.Request(request.method, str(request.url), headers=headers, content=body)
        try:
            answer = await self.mock.async_handler(asked)
        except httpx.TransportError as exc:  # a side effect's ConnectError, as httpx2 would raise it
            raise getattr(httpx2, type(exc).__name__)(str(exc), request=request) from exc
        return httpx2.Response(
            answer.status_code, headers=list(answer.headers.multi_items()), content=answer.content, request=request
        )


def result(id: Any, value: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.Response(200, json={"jsonrpc": "2.0", "id": id, "result": value}, headers=headers)


def error(status: int, code: int, message: str, **headers: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return httpx.Response(status, json=body, headers=headers)


def text_result(text: str, *, is_error: bool = False, ref_id: str = "ref-1") -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error, "_meta": {"mcp-router/refId": ref_id}}


class StandInRouter:
    """Answers initialize (a new session id each time), notifications (202), GET (405) and
    DELETE (200); tools/call goes to ``tool_answer`` (default: a page answer)."""

    def __init__(self, url: str = "http://router.test/mcp") -> None:
        self.url = url
        self.mock = respx.MockRouter(assert_all_called=False)
        self.transport = RespxTransport(self.mock)
        self.sessions: list[str] = []
        self.calls: list[tuple[str | None, dict[str, Any]]] = []  # (session id, tools/call params)
        self.deleted: list[str] = []
        self.initialize_headers: list[httpx.Headers] = []
        self.tool_answer: ToolAnswer = lambda request, params: result(
            json.loads(request.content)["id"], text_result("### Page\n- Page URL: https://example.com/\n")
        )
        self.mock.post(url).mock(side_effect=self._post)
        self.mock.get(url).mock(return_value=httpx.Response(405))
        self.mock.delete(url).mock(side_effect=self._delete)

    async def _post(self, request: httpx.Request) -> httpx.Response:
        message = json.loads(request.content)
        method = message.get("method")
        if method == "initialize":
            self.initialize_headers.append(request.headers)
            self.sessions.append(f"session-{len(self.sessions) + 1}")
            answer = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "stand-in", "version": "1"},
            }
            return result(message["id"], answer, **{"mcp-session-id": self.sessions[-1]})
        if "id" not in message:
            return httpx.Response(202)
        if method == "tools/list":  # the SDK lists the tools before its first call
            return result(message["id"], {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]})
        if method == "tools/call":
            self.calls.append((request.headers.get("mcp-session-id"), message["params"]))
            answered = self.tool_answer(request, message["params"])
            return answered if isinstance(answered, httpx.Response) else await answered
        return error(400, -32601, f"stand-in knows no {method}")

    def _delete(self, request: httpx.Request) -> httpx.Response:
        self.deleted.append(request.headers.get("mcp-session-id", ""))
        return httpx.Response(200)
