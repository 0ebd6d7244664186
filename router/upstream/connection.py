"""Bytes to and from one worker: its connections (``upstream.py``) and the header rules."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Final
from urllib.parse import urlsplit

from router.types import H_SESSION_ID, SSE_HEADERS
from router.upstream.client import UpstreamError, UpstreamResponse
from router.upstream.pool import UpstreamPool
from workers.ports import LOOPBACK
from workers.supervisor import Worker

DELETE_TIMEOUT: Final = 3.0

HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Never forwarded upstream: recomputed by the client, replaced by us, checked by us, or asking for compression.
_NOT_UPSTREAM: Final = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"mcp-session-id",
    b"accept-encoding",
    b"origin",  # the router is the security boundary; workers may apply stricter rules of their own
    b"mcp-router-conversation",  # the router's own: which conversation a session continues
    # The router has the whole body already (and its ASGI server answered any 100 Continue); a
    # worker asked would write an interim head of its own.
    b"expect",
}
# Never forwarded downstream: recomputed by the ASGI server or replaced by us.
_NOT_DOWNSTREAM: Final = HOP_BY_HOP | {
    b"content-length",
    b"mcp-session-id",
    b"date",
    b"server",
    b"cache-control",
    b"x-accel-buffering",
}


def upstream_headers(
    client_headers: Iterable[tuple[bytes, bytes]], *, host: str, worker_session_id: str | None
) -> list[tuple[bytes, bytes]]:
    """The client's headers as the worker should see them: its own Host and its own session id."""
    named_in_connection = set()
    for key, value in client_headers:
        if key == b"connection":
            named_in_connection |= {v.strip().lower() for v in value.split(b",")}
    headers = [
        (key, value)
        for key, value in client_headers
        if key not in _NOT_UPSTREAM and key not in named_in_connection
    ]
    headers.append((b"host", host.encode()))
    if worker_session_id is not None:
        headers.append((H_SESSION_ID.encode(), worker_session_id.encode()))
    return headers


def downstream_headers(
    worker_headers: Iterable[tuple[bytes, bytes]], *, router_session_id: str | None
) -> list[tuple[bytes, bytes]]:
    headers = [(k.lower(), v) for k, v in worker_headers if k.lower() not in _NOT_DOWNSTREAM]
    if router_session_id is not None:
        headers.append((H_SESSION_ID.encode(), router_session_id.encode()))
    return headers


Head = list[tuple[bytes, bytes]]


def answer_headers(worker_headers: Iterable[tuple[bytes, bytes]], router_session_id: str) -> Head:
    """The head of a worker's answer as the client gets it: under the router's session id."""
    return downstream_headers(worker_headers, router_session_id=router_session_id)


def sse_answer_headers(worker_headers: Iterable[tuple[bytes, bytes]], router_session_id: str) -> Head:
    """The head of a worker's SSE answer as the client gets it (the router's SSE headers)."""
    headers = [h for h in answer_headers(worker_headers, router_session_id) if h[0] != b"content-type"]
    return [*headers, *SSE_HEADERS]


class WorkerConnection:
    """The router's side of one worker: where it listens, and kept-alive sockets for everything
    sent to it (the clients' traffic and the router's own sessions)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.url = worker.url
        self.host_header = worker.host_header
        self.upstream = UpstreamPool(LOOPBACK, worker.port, urlsplit(worker.url).path)

    async def send(
        self, method: str, headers: list[tuple[bytes, bytes]], body: bytes | None = None,
        *, sent: Callable[[], object] | None = None,
    ) -> UpstreamResponse:
        """One request of a client's; returns at the answer's head, its body is read as it comes
        (``sent``: called once the request is written, see UpstreamPool.request)."""
        return await self.upstream.request(method, headers, body, sent=sent)

    async def delete_session(self, worker_session_id: str) -> None:
        """Ends the worker's MCP session politely; the worker is ended right after anyway."""
        headers = [(b"host", self.host_header.encode()), (H_SESSION_ID.encode(), worker_session_id.encode())]
        with contextlib.suppress(UpstreamError, TimeoutError):
            async with asyncio.timeout(DELETE_TIMEOUT):
                response = await self.send("DELETE", headers)
                await response.aread()

    async def aclose(self) -> None:
        await self.upstream.aclose()
