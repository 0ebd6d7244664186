"""Proxy edge cases with a worker mocked by respx: what the router does with odd worker answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx

from tests.support import RawClient, RouterThread, router_settings


@pytest.fixture
def mocked(state_dir: Path) -> Iterator[tuple[RouterThread, RawClient, respx.MockRouter]]:
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as client:
        client.initialize()
        client.start_worker()
        worker_url = router.manager.sessions.get(client.session_id).connection.url
        # Only the worker is mocked; the test's own requests to the router go through for real.
        with respx.mock(assert_all_called=False) as mock:
            mock.route(host="127.0.0.1", port=router.port).pass_through()
            yield router, client, mock.route(url=worker_url)  # type: ignore[misc]
        client.delete()


def test_worker_5xx_becomes_502_with_jsonrpc_error(mocked: tuple[RouterThread, RawClient, respx.Route]) -> None:
    _, client, route = mocked
    route.respond(500, text="<html>boom</html>", headers={"content-type": "text/html"})
    r = client.post({"jsonrpc": "2.0", "id": 31, "method": "tools/list"})
    assert r.status_code == 502
    body = r.json()
    assert body["id"] == 31 and body["error"]["data"]["worker_status"] == 500


def test_worker_losing_the_session_is_not_a_client_404(mocked: tuple[RouterThread, RawClient, respx.Route]) -> None:
    _, client, route = mocked
    route.respond(404, json={"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "gone"}})
    r = client.post({"jsonrpc": "2.0", "id": 32, "method": "tools/list"})
    assert r.status_code == 502


def test_worker_hop_by_hop_and_length_headers_are_not_forwarded(
    mocked: tuple[RouterThread, RawClient, respx.Route],
) -> None:
    _, client, route = mocked
    body = json.dumps({"jsonrpc": "2.0", "id": 33, "result": {"tools": []}}).encode()
    route.respond(
        200,
        content=body,
        headers={
            "content-type": "application/json",
            "connection": "close",
            "keep-alive": "timeout=1",
            "x-worker": "yes",
            "mcp-session-id": "worker-internal-id",
        },
    )
    r = client.post({"jsonrpc": "2.0", "id": 33, "method": "tools/list"})
    assert r.status_code == 200
    assert r.headers["x-worker"] == "yes"
    assert r.headers["mcp-session-id"] == client.session_id
    assert "keep-alive" not in r.headers
    # The router appended its own tools, so the length differs from the worker's: no stale header.
    assert len(r.json()["result"]["tools"]) == 3
    assert int(r.headers.get("content-length", len(r.content))) == len(r.content)


def test_worker_connection_refused_is_502(mocked: tuple[RouterThread, RawClient, respx.Route]) -> None:
    _, client, route = mocked
    route.side_effect = httpx.ConnectError("refused")
    r = client.post({"jsonrpc": "2.0", "id": 34, "method": "tools/list"})
    assert r.status_code == 502 and r.json()["error"]["code"] == -32603
