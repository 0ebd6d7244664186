"""Unit tests: header rules, Origin/Host policy, SSE framing, message classification."""

from __future__ import annotations

import pytest

from router.errors import BadRequest, ParseError
from router.http.security import OriginPolicy, split_host
from router.protocol.messages import Kind, parse
from router.protocol.sse import EventSplitter, encode_event, event_data, event_id
from router.sessions.table import SessionTable, check_session_id
from router.upstream.connection import downstream_headers, upstream_headers


def test_upstream_headers_drop_hop_by_hop_and_swap_identity() -> None:
    client = [
        (b"host", b"127.0.0.1:4000"),
        (b"connection", b"keep-alive, x-secret-hop"),
        (b"x-secret-hop", b"1"),
        (b"keep-alive", b"timeout=5"),
        (b"transfer-encoding", b"chunked"),
        (b"content-length", b"42"),
        (b"accept-encoding", b"gzip"),
        (b"origin", b"http://localhost:3000"),
        (b"mcp-session-id", b"router-id"),
        (b"mcp-protocol-version", b"2025-06-18"),
        (b"last-event-id", b"7"),
        (b"accept", b"application/json, text/event-stream"),
    ]
    out = dict(upstream_headers(client, host="localhost:23456", worker_session_id="worker-id"))
    assert out[b"host"] == b"localhost:23456"
    assert out[b"mcp-session-id"] == b"worker-id"
    assert out[b"mcp-protocol-version"] == b"2025-06-18"
    assert out[b"last-event-id"] == b"7"
    for gone in (b"connection", b"x-secret-hop", b"keep-alive", b"transfer-encoding", b"content-length",
                 b"accept-encoding", b"origin"):
        assert gone not in out


def test_downstream_headers_replace_session_id_and_drop_length() -> None:
    worker = [
        (b"Content-Type", b"text/event-stream"),
        (b"Content-Length", b"100"),
        (b"Connection", b"keep-alive"),
        (b"mcp-session-id", b"worker-id"),
        (b"x-extra", b"kept"),
    ]
    out = downstream_headers(worker, router_session_id="router-id")
    assert (b"mcp-session-id", b"router-id") in out
    assert (b"mcp-session-id", b"worker-id") not in out
    assert (b"x-extra", b"kept") in out
    assert all(k not in (b"content-length", b"connection") for k, _ in out)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("localhost:4000", True),
        ("127.0.0.1", True),
        ("[::1]:4000", True),
        (None, True),
        ("evil.example", False),
        ("localhost.evil.example:4000", False),
        ("127.0.0.1.nip.io", False),
    ],
)
def test_default_host_policy(host: str | None, allowed: bool) -> None:
    assert OriginPolicy().host_allowed(host) is allowed


def test_configured_hosts_and_origins() -> None:
    policy = OriginPolicy(["router.example:443", "box.lan:*"], ["https://app.example", "http://box.lan:*"])
    assert policy.host_allowed("router.example:443")
    assert not policy.host_allowed("router.example:80")
    assert policy.host_allowed("box.lan:9999")
    assert policy.origin_allowed("https://app.example")
    assert policy.origin_allowed("http://box.lan:3000")
    assert not policy.origin_allowed("https://app.example.evil")
    assert OriginPolicy(allowed_origins=["*"]).origin_allowed("https://anything.example")


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),
        ("http://localhost:5173", True),
        ("https://127.0.0.1:8443", True),
        ("http://[::1]", True),
        ("null", False),
        ("https://evil.example", False),
        ("chrome-extension://abc", False),
        ("http://localhost@evil.example", False),
    ],
)
def test_default_origin_policy(origin: str | None, allowed: bool) -> None:
    assert OriginPolicy().origin_allowed(origin) is allowed


def test_split_host() -> None:
    assert split_host("Example.COM:80") == ("example.com", "80")
    assert split_host("[::1]:4000") == ("[::1]", "4000")
    assert split_host("localhost") == ("localhost", None)


def test_event_splitter_cuts_only_at_boundaries() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"event: message\ndata: {\"a\"") == []
    assert splitter.feed(b":1}\n\nid: 4\ndata: x\r\n\r\ndata: y") == [
        b'event: message\ndata: {"a":1}\n\n',
        b"id: 4\ndata: x\r\n\r\n",
    ]
    assert splitter.rest() == b"data: y"


def test_event_fields() -> None:
    event = b"id: 9\nevent: message\ndata: {\"x\":\ndata: 1}\n\n"
    assert event_data(event) == b'{"x":\n1}'
    assert event_id(event) == "9"
    assert event_data(b": keep-alive\n\n") is None
    assert encode_event(b"{}", "3") == b"id: 3\nevent: message\ndata: {}\n\n"


def test_message_kinds() -> None:
    assert parse(b'{"jsonrpc":"2.0","id":1,"method":"x"}').kind is Kind.REQUEST
    assert parse(b'{"jsonrpc":"2.0","method":"x"}').kind is Kind.NOTIFICATION
    assert parse(b'{"jsonrpc":"2.0","id":"a","result":{}}').kind is Kind.RESPONSE
    with pytest.raises(ParseError):
        parse(b"{")
    with pytest.raises(BadRequest):
        parse(b'{"jsonrpc":"2.0","id":true,"method":"x"}')


def test_session_ids_are_unique_and_validated() -> None:
    table = SessionTable()
    ids = {table.create().id for _ in range(1000)}
    assert len(ids) == 1000
    with pytest.raises(BadRequest):
        check_session_id("bad id")
    with pytest.raises(BadRequest):
        check_session_id("x" * 1000)


def test_minted_ids_never_look_like_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    from router.sessions import table

    drawn = iter(["-starts-like-an-option-abcdefghij", "fine-id-abcdefghijklmnopqrstuvw"])
    monkeypatch.setattr(table.secrets, "token_urlsafe", lambda n: next(drawn))
    assert table.mint_session_id() == "fine-id-abcdefghijklmnopqrstuvw"
