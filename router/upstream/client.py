"""The router's HTTP/1.1 client to its workers: kept-alive sockets, httptools parsing, no copies.

Every forwarded request and stream goes through here, so it is kept to what a worker on loopback
needs: one request per connection at a time, ``Content-Length`` bodies out, any framing in
(httptools undoes chunking), no TLS, no redirects, no cookies, no proxies. A general client
(httpx/httpcore/h11) cost a fifth of the router's CPU per call and took a call from 10.4 to 3.6 ms
when it went; this one is a protocol object on the event loop.

Errors, drawn like httpx's::

    UpstreamError
     ├── ConnectFailed      nothing was sent: the worker does not listen (the request may go
     │                      to another worker)
     └── ConnectionBroken   the socket died or the worker spoke broken HTTP mid-exchange

Flow control: a response holds at most ``HIGH_WATER`` unread bytes before the socket is paused,
so a slow client never makes the router buffer a worker's stream.

This module is the exchange (``UpstreamResponse``) and its socket (``UpstreamConnection``);
``pool.py`` keeps the sockets to one worker and sends requests on them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final, cast

import httptools

if TYPE_CHECKING:
    from router.upstream.pool import UpstreamPool

CONNECT_TIMEOUT: Final = 5.0
# Node closes idle keep-alive sockets after 5 s; dropping ours first means a request never goes
# out on a socket the worker is closing (a POST cannot safely be sent twice).
KEEPALIVE_EXPIRY: Final = 4.0
HIGH_WATER: Final = 1024 * 1024
LOW_WATER: Final = 256 * 1024
# 1xx heads: interim, never a request's answer (101 cannot come: Upgrade is never forwarded).
INTERIM_STATUS: Final = range(100, 200)


class UpstreamError(Exception):
    """A request to a worker failed below HTTP."""


class ConnectFailed(UpstreamError):
    """The worker could not be reached; nothing was sent."""


class ConnectionBroken(UpstreamError):
    """The connection failed after the request was (perhaps) sent."""


class UpstreamResponse:
    """A worker's answer: status and headers at once, the body as it arrives."""

    __slots__ = (
        "_chunks", "_complete", "_connection", "_error", "_head", "_settled", "_size", "_waiter",
        "headers", "status_code",
    )

    def __init__(self, connection: UpstreamConnection, head: asyncio.Future[None]) -> None:
        self.status_code = 0
        self.headers: list[tuple[bytes, bytes]] = []  # names lower-cased, in the worker's order
        self._connection: UpstreamConnection | None = connection
        self._head = head
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._complete = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._settled = False  # a settle() waited its time already

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def content_type(self) -> str:
        value = self.header(b"content-type")
        return value.decode("latin-1") if value is not None else ""

    @property
    def complete(self) -> bool:
        """The whole body has arrived (it may still be unread)."""
        return self._complete

    def peek(self) -> bytes:
        """What has arrived and is unread, left unread."""
        chunks = self._chunks
        if len(chunks) > 1:
            joined = b"".join(chunks)
            chunks.clear()
            chunks.append(joined)
        return chunks[0] if chunks else b""

    async def head_arrived(self) -> None:
        """Until the status and headers are in: an UpstreamError when the exchange broke first; a
        wait cancelled spoils the connection, which is closed."""
        try:
            await self._head
        except BaseException:
            if self._connection is not None:
                self._connection.abandon(self)
            raise

    def read_now(self) -> bytes:
        """What has arrived and is unread, without waiting (``b""`` when nothing has)."""
        if not self._chunks:
            return b""
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._consumed()
        return data

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body in the pieces it arrives in (all that is waiting, joined)."""
        while True:
            data = self.read_now()
            if data:
                yield data
                continue
            if self._error is not None:
                raise self._error
            if self._complete:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def settle(self, limit: float) -> None:
        """Wait until some of the body, its end or an error has arrived, at most ``limit`` s.
        A worker writes a tool's answer head first and the event when the tool is done: waiting
        here lets a quick answer be relayed whole instead of as a stream. Only the first call
        waits: whoever looks next (the proxy after a look for a crashed page) finds it settled."""
        if self._settled or self._chunks or self._complete or self._error is not None:
            return
        self._settled = True
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(limit, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Done with it. A body not yet complete spoils the connection, which is closed."""
        connection, self._connection = self._connection, None
        if connection is not None and not self._complete:
            connection.abandon(self)

    # -- the connection's side ----------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        if self._size > HIGH_WATER and self._connection is not None:
            self._connection.pause()
        self._wake()

    def _finish(self) -> None:
        self._complete = True
        self._connection = None
        self._wake()

    def _fail(self, error: UpstreamError) -> None:
        if self._complete:
            return
        self._error = error
        if not self._head.done():
            self._head.set_exception(error)
        self._wake()

    def _consumed(self) -> None:
        was, self._size = self._size, 0
        if was > LOW_WATER and self._connection is not None:
            self._connection.resume()

    def _wake(self) -> None:
        if self._waiter is not None:
            _resolve(self._waiter)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class UpstreamConnection(asyncio.Protocol):
    """One socket to a worker, carrying one exchange at a time (an ``UpstreamPool``'s)."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: UpstreamResponse | None = None
        self.closed = False
        self.idle_since = 0.0
        self._paused = False
        self._interim = False  # the head being parsed is a 1xx (100 Continue): not the answer

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._broken(f"unreadable HTTP from the worker: {exc}")

    def eof_received(self) -> bool:
        return False  # close: a half-closed worker socket is of no use

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        if self.response is not None:
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else "the worker closed the connection"
            self.response._fail(ConnectionBroken(reason))
            self.response = None

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._interim = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None:
            self.response.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None:
            return
        status = self.parser.get_status_code()
        if status in INTERIM_STATUS:
            # An interim head (RFC 9110 15.2): the answer follows on the same exchange.
            self._interim = True
            response.headers.clear()
            return
        response.status_code = status
        if not response._head.done():
            response._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._feed(body)

    def on_message_complete(self) -> None:
        if self._interim:
            return
        response, self.response = self.response, None
        keep = self.parser.should_keep_alive()
        if response is not None:
            response._finish()
        if keep and not self.closed:
            self.resume()
            self.pool.release(self)
        else:
            self.close()

    # the pool's side

    def start(self, request: bytes, head: asyncio.Future[None]) -> UpstreamResponse:
        assert self.transport is not None
        response = UpstreamResponse(self, head)
        self.response = response
        self.transport.write(request)
        return response

    def usable(self, now: float) -> bool:
        return (
            not self.closed
            and self.transport is not None
            and not self.transport.is_closing()
            and now - self.idle_since < KEEPALIVE_EXPIRY
        )

    def abandon(self, response: UpstreamResponse) -> None:
        if self.response is response:
            self.response = None
            self.close()

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _broken(self, reason: str) -> None:
        if self.response is not None:
            self.response._fail(ConnectionBroken(reason))
            self.response = None
        self.close()
