"""Kept-alive sockets to one worker (``UpstreamPool``), and a request written on one of them: the
router's HTTP/1.1 client to its workers is this and ``client.py`` (the exchange, the socket)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from router.upstream.client import (
    CONNECT_TIMEOUT,
    ConnectFailed,
    UpstreamConnection,
    UpstreamResponse,
)

__all__ = ["UpstreamPool"]


class UpstreamPool:
    """Kept-alive connections to one worker's ``host:port``; requests on ``path``.

    Idle connections are reused newest first and dropped after ``KEEPALIVE_EXPIRY``. There is no
    cap of its own: requests come from client connections, which the router caps already.
    """

    def __init__(self, host: str, port: int, path: str, *, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.host = host
        self.port = port
        self.path = path.encode() or b"/"
        self.connect_timeout = connect_timeout
        self._idle: list[UpstreamConnection] = []
        self._open: set[UpstreamConnection] = set()
        self._closed = False

    async def request(
        self, method: str, headers: Iterable[tuple[bytes, bytes]], body: bytes | None = None,
        *, sent: Callable[[], object] | None = None,
    ) -> UpstreamResponse:
        """Sends one request; returns once the status and headers are in. ``sent`` is called
        once the request is written, before the worker answers: work the caller can do while
        the worker works."""
        if self._closed:
            raise ConnectFailed("the worker's connection pool is closed")
        connection = self._take() or await self._connect()
        response = connection.start(_encode(method, self.path, headers, body), _new_head())
        try:
            if sent is not None:
                sent()
        except BaseException:
            connection.abandon(response)  # the socket is of no further use
            raise
        await response.head_arrived()  # cancelled, or broken: the socket is closed
        return response

    @property
    def busy(self) -> int:
        """Connections carrying an exchange now (a held stream counts)."""
        return len(self._open) - len(self._idle)

    def release(self, connection: UpstreamConnection) -> None:
        if self._closed:
            connection.close()
            return
        if connection in self._idle:
            # Idle twice would hand one socket to two requests, whose answers then interleave.
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    def forget(self, connection: UpstreamConnection) -> None:
        self._open.discard(connection)
        if connection in self._idle:
            self._idle.remove(connection)

    async def aclose(self) -> None:
        self._closed = True
        for connection in list(self._open):
            connection.close()
        self._idle.clear()

    def _take(self) -> UpstreamConnection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return None

    async def _connect(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(lambda: UpstreamConnection(self), self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to the worker at {self.host}:{self.port}: {exc!r}") from None
        self._open.add(connection)
        return connection


def _new_head() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


def _encode(method: str, path: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes | None) -> bytes:
    # Header values come from uvicorn's parser (which refuses CR and LF) or from the router.
    parts = [method.encode(), b" ", path, b" HTTP/1.1\r\n"]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    if body is not None:
        parts += (b"content-length: ", str(len(body)).encode(), b"\r\n\r\n", body)
    else:
        parts.append(b"\r\n")
    return b"".join(parts)
