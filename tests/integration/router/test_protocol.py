"""Status codes and JSON-RPC error bodies for every kind of bad or unusual input."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest

from tests.support import ACCEPT_BOTH, TEST_TOKEN, RawClient, RouterThread, initialize_body, read_until_closed


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    return dict(body["error"])


@pytest.fixture
def client(fake_router: RouterThread) -> Any:
    with RawClient(fake_router.url) as c:
        yield c


@pytest.fixture
def session(client: RawClient) -> Any:
    client.initialize()
    yield client
    client.delete()


def test_server_discover_without_session_gets_400_so_clients_fall_back(client: RawClient) -> None:
    r = client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}},
        **{"mcp-protocol-version": "2026-07-28"},
    )
    assert r.status_code == 400
    err = error_of(r)
    assert err["code"] == -32600
    assert r.json()["id"] == 1


def test_request_without_session_id_is_400(client: RawClient) -> None:
    r = client.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert r.status_code == 400 and error_of(r)["code"] == -32600


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe"])
def test_invalid_json_is_400_parse_error(client: RawClient, raw: bytes) -> None:
    r = client.post(raw)
    assert r.status_code == 400 and error_of(r)["code"] == -32700


def test_batch_is_rejected(client: RawClient) -> None:
    r = client.post([initialize_body(1), initialize_body(2)])
    assert r.status_code == 400 and error_of(r)["code"] == -32600


@pytest.mark.parametrize(
    "body", [{"id": 1, "method": "x"}, {"jsonrpc": "2.0", "id": [1], "method": "x"}, {"jsonrpc": "2.0"}, 42]
)
def test_not_a_jsonrpc_message_is_400(client: RawClient, body: Any) -> None:
    r = client.post(body)
    assert r.status_code == 400 and error_of(r)["code"] == -32600


def test_wrong_content_type_is_415(client: RawClient) -> None:
    r = client.post(initialize_body(), **{"content-type": "text/plain"})
    assert r.status_code == 415 and error_of(r)["code"] == -32600


def test_missing_accept_types_is_406(client: RawClient) -> None:
    r = client.post(initialize_body(), accept="application/json")
    assert r.status_code == 406 and "text/event-stream" in error_of(r)["message"]


def test_get_without_sse_accept_is_406(session: RawClient) -> None:
    r = session.http.get(session.url, headers={"accept": "application/json", "mcp-session-id": session.session_id})
    assert r.status_code == 406


def test_oversized_body_is_413(client: RawClient) -> None:
    big = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"pad": "x" * (4 * 1024 * 1024 + 10)}}
    r = client.post(big)
    assert r.status_code == 413 and error_of(r)["code"] == -32600


def test_oversized_chunked_body_is_413(client: RawClient) -> None:
    def chunks() -> Any:
        for _ in range(5):
            yield b" " * (1024 * 1024)

    r = client.http.post(
        client.url, content=chunks(), headers={"content-type": "application/json", "accept": ACCEPT_BOTH}
    )
    assert r.status_code == 413


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_other_methods_are_405(client: RawClient, method: str) -> None:
    r = client.http.request(method, client.url, headers=client.headers())
    assert r.status_code == 405 and "GET" in r.headers["allow"]
    assert error_of(r)["code"] == -32600


def test_unknown_session_is_404(client: RawClient) -> None:
    client.session_id = "A" * 32
    r = client.post({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert r.status_code == 404 and r.json()["id"] == 3
    assert client.http.get(client.url, headers=client.headers()).status_code == 404
    assert client.delete().status_code == 404


@pytest.mark.parametrize("bad", ["x" * 500, "has space", "tab\there"])
def test_malformed_session_id_is_400(client: RawClient, bad: str) -> None:
    client.session_id = bad
    r = client.post({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert r.status_code == 400


def test_non_ascii_session_id_is_rejected(client: RawClient) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"accept", ACCEPT_BOTH.encode()),
        (b"mcp-session-id", "s\u00e9ssion".encode()),
    ]
    r = client.http.post(client.url, content=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', headers=headers)
    assert r.status_code in (400, 404)
    assert "error" in r.json()


def test_unsupported_protocol_version_is_400(session: RawClient) -> None:
    r = session.post({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, **{"mcp-protocol-version": "1999-01-01"})
    assert r.status_code == 400 and "supported" in error_of(r)["data"]


def test_supported_protocol_version_header_passes(session: RawClient) -> None:
    r = session.post({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, **{"mcp-protocol-version": "2025-06-18"})
    assert r.status_code == 200


def test_reinitialize_inside_session_is_400(session: RawClient) -> None:
    r = session.post(initialize_body(9))
    assert r.status_code == 400


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "null", "http://localhost.evil.example", "file://"]
)
def test_hostile_origin_is_403(client: RawClient, origin: str) -> None:
    r = client.post(initialize_body(), origin=origin)
    assert r.status_code == 403 and error_of(r)["code"] == -32600


@pytest.mark.parametrize("origin", ["http://localhost:3000", "https://127.0.0.1", "http://[::1]:8080"])
def test_loopback_origin_is_allowed(fake_router: RouterThread, origin: str) -> None:
    with RawClient(fake_router.url) as c:
        c.initialize()
        assert c.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, origin=origin).status_code == 200
        c.delete()


@pytest.mark.parametrize("host", ["evil.example", "evil.example:4000", "127.0.0.1.evil.example"])
def test_hostile_host_is_421(client: RawClient, host: str) -> None:
    r = client.post(initialize_body(), host=host)
    assert r.status_code == 421 and error_of(r)["code"] == -32600


@pytest.mark.parametrize(
    "twice",
    [
        ("host: 127.0.0.1", "host: evil.example"),
        ("host: evil.example", "host: 127.0.0.1"),
        ("origin: http://127.0.0.1", "origin: https://evil.example"),
    ],
)
def test_two_hosts_or_origins_are_400(fake_router: RouterThread, twice: tuple[str, str]) -> None:
    body = json.dumps(initialize_body()).encode()
    head = [
        "POST /mcp HTTP/1.1",
        *(twice if twice[0].startswith("host") else ("host: 127.0.0.1", *twice)),
        f"authorization: Bearer {TEST_TOKEN}",
        "content-type: application/json",
        f"accept: {ACCEPT_BOTH}",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    with socket.create_connection(("127.0.0.1", fake_router.port), timeout=10) as s:
        s.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        answer = read_until_closed(s)
    status, _, rest = answer.partition(b"\r\n")
    assert status.split()[1] == b"400", answer[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["error"]["code"] == -32600


def test_healthz_answers(fake_router: RouterThread) -> None:
    r = httpx.get(f"http://127.0.0.1:{fake_router.port}/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_notification_gets_202_with_no_body(session: RawClient) -> None:
    r = session.post({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
    assert r.status_code == 202 and r.content == b""


def test_session_id_is_long_random_and_url_safe(fake_router: RouterThread) -> None:
    ids = set()
    for _ in range(3):
        with RawClient(fake_router.url) as c:
            c.initialize()
            assert c.session_id is not None
            ids.add(c.session_id)
            assert len(c.session_id) >= 22
            assert all(ch.isalnum() or ch in "-_" for ch in c.session_id)
            c.delete()
    assert len(ids) == 3


def test_worker_session_id_never_leaks(session: RawClient, fake_router: RouterThread) -> None:
    session.start_worker()
    routed = fake_router.manager.sessions.get(session.session_id)
    assert routed.worker_session_id and routed.worker_session_id != session.session_id
    r = session.post({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
    assert r.headers["mcp-session-id"] == session.session_id
    assert routed.worker_session_id not in r.text
    assert json.loads(r.text.split("data: ", 1)[1])["id"] == 7
