"""When a worker fails a client's message: whether it is dying, and the 502 the client gets."""

from __future__ import annotations

from typing import Final

from router.http.errors import WorkerUnreachable
from router.http.proxy import WorkerConnection
from router.http.upstream import ConnectFailed, UpstreamError
from router.sessions.table import Session

# How long a worker whose socket broke under a request may take to exit if it is dying: a
# SIGKILLed node is gone in milliseconds, on a loaded machine later.
DEATH_WAIT: Final = 1.0


async def worker_died(connection: WorkerConnection, exc: UpstreamError) -> bool:
    """Whether the worker of a failed exchange is dead or dying: it refused, or it exits within
    DEATH_WAIT (a broken socket alone does not tell: see Worker.exits_within)."""
    return isinstance(exc, ConnectFailed) or await connection.worker.exits_within(DEATH_WAIT)


def unreachable(session: Session, exc: Exception) -> WorkerUnreachable:
    return WorkerUnreachable(
        f"Worker unreachable: {type(exc).__name__}: {exc}",
        data={"session": session.id, "stderr": session.connection.worker.stderr_tail() if session.connection else ""},
    )
