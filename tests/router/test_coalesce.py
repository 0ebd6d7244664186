"""One send per loop turn (router/http/coalesce.py): writes gathered, flushed once, in order;
close and write_eof flush first, abort drops."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from router.http.coalesce import FLUSH_AT, CoalescingTransport
from router.http.limits import limited_protocol
from tests.support import asgi_in_thread, read_until_closed, wait_for
from tests.support.wait import POLL_INTERVAL


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.events.append("close")
        self.closing = True

    def write_eof(self) -> None:
        self.events.append("eof")

    def abort(self) -> None:
        self.events.append("abort")
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


async def _next_turn() -> None:
    await asyncio.sleep(0)


async def test_writes_of_one_turn_leave_in_one_write_in_order() -> None:
    fake = FakeTransport()
    transport = CoalescingTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"head ")
    transport.write(b"")
    transport.writelines([b"body ", bytearray(b"tail")])
    assert fake.writes == [] and transport.get_write_buffer_size() == 14 + 7
    await _next_turn()
    assert fake.writes == [b"head body tail"]
    transport.write(b"next")
    await _next_turn()
    assert fake.writes == [b"head body tail", b"next"]


async def test_past_flush_at_what_is_gathered_leaves_at_once() -> None:
    # A big body must reach the real transport in the turn it is written, so that its
    # pause_writing can stop the writer there (flow control).
    fake = FakeTransport()
    transport = CoalescingTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    half = b"x" * (FLUSH_AT // 2)
    transport.write(b"head")
    transport.write(half)
    assert fake.writes == []
    transport.write(half)
    assert fake.writes == [b"head" + half + half] and transport.get_write_buffer_size() == 7
    transport.write(b"tail")
    await _next_turn()
    assert fake.writes[1:] == [b"tail"]


async def test_close_and_eof_flush_first_abort_drops() -> None:
    loop = asyncio.get_running_loop()
    fake = FakeTransport()
    transport = CoalescingTransport(fake, loop)  # type: ignore[arg-type]
    transport.write(b"a")
    transport.write_eof()
    assert fake.writes == [b"a"] and fake.events == ["eof"]
    transport.write(b"b")
    transport.close()
    assert fake.writes == [b"a", b"b"] and fake.events == ["eof", "close"]
    await _next_turn()  # the scheduled flush finds nothing more and writes nothing to a closed one
    assert fake.writes == [b"a", b"b"]

    fake = FakeTransport()
    transport = CoalescingTransport(fake, loop)  # type: ignore[arg-type]
    transport.write(b"lost")
    transport.abort()
    await _next_turn()
    assert fake.writes == [] and fake.events == ["abort"]
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is the wrapped one's


async def _streamed(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    for part in (b"one ", b"two ", b"three"):
        await send({"type": "http.response.body", "body": part, "more_body": True})
        await asyncio.sleep(0)  # each part in a turn of its own
    await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with asgi_in_thread(_streamed, http=limited_protocol()) as port:
        yield port


def test_a_streamed_answer_through_the_router_protocol_arrives_whole_and_in_order(port: int) -> None:
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.settimeout(5)
            # Connection: close, so the server closes after the last chunk: close must flush first.
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = read_until_closed(s)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head
        assert body == b"4\r\none \r\n4\r\ntwo \r\n5\r\nthree\r\n0\r\n\r\n"


BIG_CHUNK = 256 * 1024
BIG_CHUNKS = 64  # 16 MiB: past what the socket buffers hold (the client's is made small)
CLIENT_RCVBUF = 64 * 1024
UNREAD_WINDOW_S = 1.5
sent_before_reading: dict[str, int] = {}


async def _big(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    size = str(BIG_CHUNK * BIG_CHUNKS).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", size)]})
    for i in range(BIG_CHUNKS):
        sent_before_reading["chunks"] = i
        await send({"type": "http.response.body", "body": b"x" * BIG_CHUNK, "more_body": i < BIG_CHUNKS - 1})
    sent_before_reading["done"] = 1


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_client_that_does_not_read_holds_the_writer_back(loop: str) -> None:
    # Flow control through the wrapper: the app's sends wait once the socket is full, rather
    # than the router gathering the whole body in memory.
    sent_before_reading.clear()
    with asgi_in_thread(_big, http=limited_protocol(), loop=loop) as port, socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF)
        s.settimeout(30)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        wait_for(lambda: sent_before_reading.get("chunks", 0) > 0)
        # A negative, so a window: unheld, all 16 MiB were gathered and "sent" within ~0.1 s.
        deadline = time.monotonic() + UNREAD_WINDOW_S
        while time.monotonic() < deadline:
            assert "done" not in sent_before_reading, "the whole body was taken for a client reading nothing"
            time.sleep(POLL_INTERVAL)
        assert sent_before_reading["chunks"] < BIG_CHUNKS // 2
        body = read_until_closed(s).partition(b"\r\n\r\n")[2]
    assert len(body) == BIG_CHUNK * BIG_CHUNKS
