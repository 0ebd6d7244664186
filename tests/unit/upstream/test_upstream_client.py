"""The router's HTTP/1.1 client to its workers, against a fake socket: what it writes, how it reads
heads, bodies and streams, when it keeps a socket and when it drops one."""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator

import pytest

from router.upstream import pool as pool_module
from router.upstream.client import HIGH_WATER, KEEPALIVE_EXPIRY, ConnectFailed, ConnectionBroken
from router.upstream.pool import UpstreamPool
from tests.fakes.fake_transport import FakeWorkerLink

HEAD_JSON = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n"
HEAD_SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENT = b"event: message\ndata: {}\n\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture
async def link(monkeypatch: pytest.MonkeyPatch) -> FakeWorkerLink:
    link = FakeWorkerLink()
    link.install(asyncio.get_running_loop(), monkeypatch)
    return link


@pytest.fixture
async def pool(link: FakeWorkerLink) -> AsyncIterator[UpstreamPool]:
    pool = UpstreamPool("127.0.0.1", 20001, "/mcp")
    yield pool
    await pool.aclose()


async def send(pool: UpstreamPool, body: bytes | None = b"{}") -> asyncio.Task[object]:
    """A request under way, written and waiting for its head."""
    sent = asyncio.Event()
    task = asyncio.create_task(pool.request("POST", [(b"host", b"w")], body, sent=sent.set))
    await sent.wait()
    return task


async def test_a_request_is_written_whole_and_returns_once_its_head_is_in(
    link: FakeWorkerLink, pool: UpstreamPool,
) -> None:
    sent = asyncio.Event()
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    task = asyncio.create_task(pool.request("POST", headers, b'{"a":1}', sent=sent.set))
    await sent.wait()
    assert link.last.take_written() == (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b'content-length: 7\r\n\r\n{"a":1}'
    )
    assert not task.done()
    link.last.answer(HEAD_JSON)
    response = await task
    assert response.status_code == 200 and response.content_type == "application/json"
    assert response.headers == [(b"content-type", b"application/json"), (b"content-length", b"2")]
    assert not response.complete
    link.last.answer(b"{}")
    assert await response.aread() == b"{}"


async def test_a_bodyless_request_has_no_length(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    await send(pool, body=None)
    assert link.last.take_written() == b"POST /mcp HTTP/1.1\r\nhost: w\r\n\r\n"


async def test_a_finished_exchange_leaves_its_socket_for_the_next(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    for _ in range(3):
        task = await send(pool)
        assert pool.busy == 1
        link.last.answer(HEAD_JSON + b"{}")
        assert await (await task).aread() == b"{}"
        assert pool.busy == 0
    assert len(link.transports) == 1


async def test_connection_close_is_honoured(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    task = await send(pool)
    link.last.answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
    assert await (await task).aread() == b"{}"
    assert link.last.is_closing()
    await send(pool)
    assert len(link.transports) == 2


async def test_a_socket_idle_past_the_keepalive_is_not_reused(
    link: FakeWorkerLink, pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(pool_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    task = await send(pool)
    link.last.answer(HEAD_JSON + b"{}")
    await (await task).aread()
    clock[0] += KEEPALIVE_EXPIRY + 0.1
    await send(pool)
    assert len(link.transports) == 2 and link.transports[0].is_closing()


async def test_a_stream_is_relayed_event_by_event(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    task = await send(pool)
    link.last.answer(HEAD_SSE)
    response = await task
    events = response.aiter_raw()
    link.last.answer(chunk(EVENT))
    assert await anext(events) == EVENT  # before the stream ends: nothing is held back
    link.last.answer(chunk(b"event: message\ndata: 2\n\n"))
    assert await anext(events) == b"event: message\ndata: 2\n\n"
    link.last.answer(b"0\r\n\r\n")
    assert [rest async for rest in events] == []
    assert response.complete and pool.busy == 0


async def test_an_interim_head_is_not_the_answer(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    task = await send(pool)
    link.last.answer(b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n")
    link.last.answer(HEAD_JSON + b"{}")
    response = await task
    assert response.status_code == 200
    assert response.header(b"x-interim") is None
    assert await response.aread() == b"{}"


async def test_a_worker_hanging_up_mid_body_breaks_the_exchange(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    task = await send(pool)
    link.last.answer(HEAD_SSE + chunk(EVENT))
    response = await task
    link.last.hang_up()
    with pytest.raises(ConnectionBroken, match="closed the connection"):
        await response.aread()
    assert pool.busy == 0
    await send(pool)
    assert len(link.transports) == 2


async def test_a_worker_hanging_up_before_its_head_breaks_the_request(
    link: FakeWorkerLink, pool: UpstreamPool,
) -> None:
    task = await send(pool)
    link.last.hang_up()
    with pytest.raises(ConnectionBroken):
        await task


async def test_broken_http_breaks_the_exchange_and_the_socket(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    task = await send(pool)
    link.last.answer(b"SPDY/9 what\r\n\r\n")
    with pytest.raises(ConnectionBroken, match="unreadable HTTP"):
        await task
    assert link.last.is_closing()


async def test_a_worker_that_does_not_listen_is_a_connect_failure(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    link.refuse = ConnectionRefusedError(111, "Connection refused")
    with pytest.raises(ConnectFailed, match=r"127\.0\.0\.1:20001"):
        await pool.request("POST", [], b"{}")
    assert link.transports == []


async def test_a_closed_pool_sends_nothing(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    await pool.aclose()
    with pytest.raises(ConnectFailed, match="closed"):
        await pool.request("POST", [], b"{}")
    assert link.transports == []


async def test_a_slow_reader_pauses_the_worker_socket_and_reading_resumes_it(
    link: FakeWorkerLink, pool: UpstreamPool,
) -> None:
    task = await send(pool)
    link.last.answer(HEAD_SSE)
    response = await task
    big = b"x" * (HIGH_WATER // 4)
    for _ in range(5):
        link.last.answer(chunk(big))
    assert not link.last.reading  # more than HIGH_WATER unread: the router stops reading
    assert len(response.read_now()) == 5 * len(big)
    assert link.last.reading


async def test_closing_an_unfinished_answer_drops_its_socket(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    task = await send(pool)
    link.last.answer(HEAD_SSE + chunk(EVENT))
    response = await task
    await response.aclose()
    assert link.last.is_closing()
    await send(pool)
    assert len(link.transports) == 2  # a half-read stream's socket is never handed on


async def test_a_request_cancelled_before_its_head_drops_its_socket(link: FakeWorkerLink, pool: UpstreamPool) -> None:
    task = await send(pool)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert link.last.is_closing()


async def test_settle_waits_for_the_first_bytes_but_no_longer_than_its_limit(
    link: FakeWorkerLink, pool: UpstreamPool,
) -> None:
    task = await send(pool)
    link.last.answer(HEAD_SSE)
    response = await task
    waiting = asyncio.create_task(response.settle(limit=30.0))
    link.last.answer(chunk(EVENT))
    await asyncio.wait_for(waiting, timeout=5.0)  # woken by the event, long before its limit
    assert response.peek() == EVENT
