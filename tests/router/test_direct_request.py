"""DirectRequest's framing and flow (router/http/direct.py) against a stand-in connection: what it
writes to the socket for each kind of answer, and when it hands the connection back."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from router.http.direct import DirectRequest
from router.http.sse import encode_event, lone_event_data

SSE = [(b"content-type", b"text/event-stream")]


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True


class FakeFlow:
    def __init__(self) -> None:
        self.write_paused = False
        self.resumed = asyncio.Event()

    async def drain(self) -> None:
        await self.resumed.wait()


class FakeConnection:
    def __init__(self) -> None:
        self.transport = FakeTransport()
        self.flow = FakeFlow()
        self.logger = logging.getLogger("test.direct")
        self.completed = 0

    def on_response_complete(self) -> None:
        self.completed += 1


def request(connection: FakeConnection, body: bytes = b"{}", *, keep_alive: bool = True) -> DirectRequest:
    return DirectRequest(connection, body, keep_alive=keep_alive, default_headers=[(b"server", b"test")])


def head_of(data: bytes) -> tuple[str, dict[str, str], bytes]:
    head, body = data.split(b"\r\n\r\n", 1)
    status, *lines = head.decode().split("\r\n")
    return status, dict(line.split(": ", 1) for line in lines), body


async def test_an_answer_of_a_known_length_is_framed_by_it() -> None:
    connection = FakeConnection()
    r = request(connection)
    body = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    await r.send({"type": "http.response.start", "status": 200, "headers": [(b"Content-Length", b"%d" % len(body))]})
    [head] = connection.transport.writes  # at once: a streamed answer's head says the call is under way
    status, headers, _ = head_of(head)
    assert status == "HTTP/1.1 200 OK"
    assert headers == {"server": "test", "content-length": str(len(body))}
    await r.send({"type": "http.response.body", "body": body})
    assert connection.transport.writes == [head, body]
    assert r.response_complete and connection.completed == 1 and not connection.transport.closed


async def test_a_streamed_answer_is_chunked_and_ends_with_the_last_chunk() -> None:
    connection = FakeConnection()
    r = request(connection)
    await r.send({"type": "http.response.start", "status": 200, "headers": SSE})
    await r.send({"type": "http.response.body", "body": b"one", "more_body": True})
    await r.send({"type": "http.response.body", "body": b"", "more_body": True})  # nothing to write
    assert connection.completed == 0
    await r.send({"type": "http.response.body", "body": b"two"})
    head, first, last = connection.transport.writes
    assert head_of(head)[1]["transfer-encoding"] == "chunked"
    assert first == b"3\r\none\r\n" and last == b"3\r\ntwo\r\n0\r\n\r\n"
    assert connection.completed == 1


async def test_a_length_the_app_gives_is_kept_and_held_to() -> None:
    connection = FakeConnection()
    r = request(connection)
    await r.send({"type": "http.response.start", "status": 200, "headers": [(b"Content-Length", b"4")]})
    await r.send({"type": "http.response.body", "body": b"ab", "more_body": True})
    with pytest.raises(RuntimeError, match="longer"):
        await r.send({"type": "http.response.body", "body": b"cde"})
    assert head_of(connection.transport.writes[0])[1]["content-length"] == "4"
    assert b"transfer-encoding" not in connection.transport.writes[0]


async def test_the_last_answer_of_a_connection_says_so_and_closes_it() -> None:
    for keep_alive, app_headers in ((False, []), (True, [(b"connection", b"close")])):
        connection = FakeConnection()
        r = request(connection, keep_alive=keep_alive)
        await r.send({"type": "http.response.start", "status": 200, "headers": app_headers})
        await r.send({"type": "http.response.body", "body": b"x"})
        _, headers, _ = head_of(connection.transport.writes[0])
        assert headers["connection"] == "close"
        assert connection.transport.closed and connection.completed == 0


async def test_receive_hands_the_body_over_then_waits_for_the_client_to_go() -> None:
    connection = FakeConnection()
    r = request(connection, b'{"id":1}')
    assert await r.receive() == {"type": "http.request", "body": b'{"id":1}', "more_body": False}
    waiting = asyncio.ensure_future(r.receive())
    await asyncio.sleep(0)
    assert not waiting.done()
    r.disconnected()
    assert await asyncio.wait_for(waiting, 5) == {"type": "http.disconnect"}
    await r.send({"type": "http.response.start", "status": 200, "headers": []})
    await r.send({"type": "http.response.body", "body": b"late"})
    assert connection.transport.writes == []  # nothing written to a client that went


async def test_a_client_that_does_not_read_pauses_the_answer() -> None:
    connection = FakeConnection()
    r = request(connection)
    await r.send({"type": "http.response.start", "status": 200, "headers": SSE})
    await r.send({"type": "http.response.body", "body": b"one", "more_body": True})
    connection.flow.write_paused = True
    sending = asyncio.ensure_future(r.send({"type": "http.response.body", "body": b"two", "more_body": True}))
    await asyncio.sleep(0.01)
    assert not sending.done() and len(connection.transport.writes) == 2
    connection.flow.write_paused = False
    connection.flow.resumed.set()
    await asyncio.wait_for(sending, 5)
    assert connection.transport.writes[-1] == b"3\r\ntwo\r\n"


async def test_an_app_that_fails_mid_answer_has_its_connection_cut(caplog: pytest.LogCaptureFixture) -> None:
    connection = FakeConnection()
    r = request(connection)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        await send({"type": "http.response.body", "body": b"half", "more_body": True})
        raise ValueError("broke")

    with caplog.at_level(logging.ERROR, "test.direct"):
        await r.run(app, {})
    assert connection.transport.closed and connection.completed == 0
    assert "Exception in ASGI application" in caplog.text


async def test_an_app_that_never_finishes_its_answer_has_its_connection_cut(caplog: pytest.LogCaptureFixture) -> None:
    connection = FakeConnection()
    r = request(connection)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})

    with caplog.at_level(logging.ERROR):
        await r.run(app, {})
    assert connection.transport.closed
    assert "without completing" in caplog.text


def test_a_plain_lone_event_is_read_without_the_splitter() -> None:
    assert lone_event_data(encode_event(b'{"id":1}')) == b'{"id":1}'
    assert lone_event_data(encode_event(b'{"id":1}', "7")) is None  # an id: the general path keeps it
    assert lone_event_data(encode_event(b"{}") * 2) is None
    assert lone_event_data(b"event: message\ndata: a\ndata: b\n\n") is None
    assert lone_event_data(b"event: message\r\ndata: {}\r\n\r\n") == b"{}"  # as the python-sdk writes it
    assert lone_event_data(b"event: message\r\ndata: {}\n\n") is None
    assert lone_event_data(b"event: message\r\ndata: a\r\ndata: b\r\n\r\n") is None
    assert lone_event_data(b"event: message\ndata: {}\n") is None  # not yet whole


async def test_an_app_that_returns_or_is_cancelled_before_answering_gets_a_500() -> None:
    async def silent(scope: Any, receive: Any, send: Any) -> None:
        return None

    async def cancelled(scope: Any, receive: Any, send: Any) -> None:
        raise asyncio.CancelledError  # the server's shutdown timeout cancels what still runs

    for app in (silent, cancelled):
        connection = FakeConnection()
        await request(connection).run(app, {})
        status, headers, body = head_of(b"".join(connection.transport.writes))
        assert status == "HTTP/1.1 500 Internal Server Error"
        assert headers["connection"] == "close" and body == b"Internal Server Error"
        assert connection.transport.closed


async def test_a_receive_still_waiting_when_the_answer_is_complete_is_told_the_exchange_is_over() -> None:
    connection = FakeConnection()
    r = request(connection)
    await r.receive()
    waiting = asyncio.ensure_future(r.receive())
    await asyncio.sleep(0)
    await r.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
    await r.send({"type": "http.response.body", "body": b""})
    assert await asyncio.wait_for(waiting, 5) == {"type": "http.disconnect"}
