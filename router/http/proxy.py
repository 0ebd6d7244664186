"""Bytes to and from one worker: one keep-alive connection pool per worker, header rules."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Final

import httpx

from router.types import H_SESSION_ID
from workers.supervisor import Worker

CONNECT_TIMEOUT: Final = 5.0
# Streams and tool calls may legitimately stay silent for minutes; a dead worker closes the
# socket, which httpx reports at once, so no read timeout is needed to notice one.
READ_TIMEOUT: Final = None
DELETE_TIMEOUT: Final = 3.0
MAX_CONNECTIONS_PER_WORKER: Final = 16
# Node closes idle keep-alive sockets after 5 s; dropping ours first means a request never goes
# out on a socket the worker is closing (a POST cannot safely be retried).
KEEPALIVE_EXPIRY: Final = 4.0

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
# Never forwarded upstream: recomputed by httpx, replaced by us, checked by us, or asking for compression.
_NOT_UPSTREAM: Final = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"mcp-session-id",
    b"accept-encoding",
    b"origin",  # the router is the security boundary; workers may apply stricter rules of their own
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


class WorkerConnection:
    """The router's side of one worker: where it listens and a pooled HTTP client for it."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.url = worker.url
        self.host_header = worker.host_header
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
            limits=httpx.Limits(
                max_connections=MAX_CONNECTIONS_PER_WORKER,
                max_keepalive_connections=MAX_CONNECTIONS_PER_WORKER,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            ),
            trust_env=False,
        )

    async def send(
        self, method: str, headers: list[tuple[bytes, bytes]], body: bytes | None = None
    ) -> httpx.Response:
        request = self.client.build_request(method, self.url, headers=headers, content=body)
        return await self.client.send(request, stream=True)

    async def delete_session(self, worker_session_id: str) -> None:
        """Ends the worker's MCP session politely; the worker is ended right after anyway."""
        with contextlib.suppress(httpx.HTTPError):
            await self.client.delete(
                self.url,
                headers={"host": self.host_header, H_SESSION_ID: worker_session_id},
                timeout=DELETE_TIMEOUT,
            )

    async def aclose(self) -> None:
        await self.client.aclose()
