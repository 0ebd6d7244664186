"""When a worker fails a client's message: whether it is dying, whether the page the call was
for crashed under it, and the 502 the client gets."""

from __future__ import annotations

from typing import Final

from router.errors import WorkerUnreachable
from router.http.exchange import Exchange
from router.protocol.sse import lone_event_data
from router.sessions.page_crash import lost_page
from router.sessions.table import Session
from router.sessions.unrestored import BLANK
from router.types import SSE
from router.upstream.client import ConnectFailed, UpstreamError, UpstreamResponse
from router.upstream.connection import WorkerConnection

# How long a worker whose socket broke under a request may take to exit if it is dying: a
# SIGKILLed node is gone in milliseconds, on a loaded machine later.
DEATH_WAIT: Final = 1.0


async def worker_died(connection: WorkerConnection, exc: UpstreamError) -> bool:
    """Whether the worker of a failed exchange is dead or dying: it refused, or it exits within
    DEATH_WAIT (a broken socket alone does not tell: see Worker.exits_within)."""
    return isinstance(exc, ConnectFailed) or await connection.worker.exits_within(DEATH_WAIT)


async def crashed_page_under(
    session: Session, upstream: UpstreamResponse, exchange: Exchange, settle: float
) -> WorkerConnection | None:
    """The worker under which a tool call's answer shows the session's page crashed (router/
    sessions/page_crash.py), else None: the call ran on no page of the client's, so it goes once
    more, to the worker resumed with the page; this answer is closed. An answer read here is
    parsed once: the exchange keeps what it read for when it takes the answer."""
    connection = session.connection
    if connection is None or upstream.status_code != 200 or not upstream.content_type.startswith(SSE):
        return None
    await upstream.settle(settle)
    if session.current_url in (None, BLANK) or not upstream.complete:
        return None
    payload = lone_event_data(upstream.peek())
    answer = exchange.read(payload) if payload is not None else None
    if answer is None or answer.facts is None or not lost_page(answer.facts, connection.worker.output_dir):
        return None
    await upstream.aclose()
    return connection


def unreachable(session: Session, exc: Exception) -> WorkerUnreachable:
    return WorkerUnreachable(
        f"Worker unreachable: {type(exc).__name__}: {exc}",
        data={"session": session.id, "stderr": session.connection.worker.stderr_tail() if session.connection else ""},
    )
