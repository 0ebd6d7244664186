"""The worker's requests to the client (pings, ``roots/list``), relayed on the client's GET stream
under ids of the router's own, and whom each answer goes back to.

Every worker session numbers its requests from 0, and one client session has several over its
life (a resume, a crash, a session the worker forgot and the router reopened): the client would
be asked twice under one id, which the spec forbids within a session, and its late answer to the
old worker session's question would reach the new one as the answer to its own. So each request
gets an id unique in the router session (``WORKER_ID_PREFIX``, a tag of this table, a count: a
router restart starts a new table, and its ids still differ), and its answer goes back under the
worker's own id, to the worker session that asked, only while that is still the session's.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from router.types import CANCELLED

if TYPE_CHECKING:
    from router.upstream.connection import WorkerConnection

# Never a prefix of the router's own questions' ids (router/sessions/roots.py ROUTER_ID_PREFIX),
# and not what an SDK numbers its requests with (integers).
WORKER_ID_PREFIX: Final = "mcp-router-w"
MAX_ASKED: Final = 64  # the worker's open requests to the client remembered, to route the answers
TAG_BYTES: Final = 3


def issued_ids(prefix: str) -> Iterator[str]:
    """Ids for requests the router sends a client, never issued before in its session: a tag of
    their own (a session taken up after a restart of the router counts from 1 again), a count."""
    tag = secrets.token_hex(TAG_BYTES)
    for n in itertools.count(1):
        yield f"{prefix}{tag}-{n}"


@dataclass(frozen=True, slots=True)
class Asker:
    """Who asked what the client was asked under one of our ids."""

    connection: WorkerConnection
    worker_session_id: str
    request_id: Any  # the worker's own id, as it sent it

    def is_from(self, connection: WorkerConnection | None, worker_session_id: str | None) -> bool:
        return self.connection is connection and self.worker_session_id == worker_session_id


class WorkerQuestions:
    """One session's open worker requests, by the id the client saw; the oldest go past MAX_ASKED."""

    def __init__(self) -> None:
        self._open: dict[str, Asker] = {}
        self._ids = issued_ids(WORKER_ID_PREFIX)

    def ask(self, request_id: Any, connection: WorkerConnection, worker_session_id: str) -> str:
        """The id the client sees for the worker's ``request_id``."""
        issued = next(self._ids)
        self._open[issued] = Asker(connection, worker_session_id, request_id)
        while len(self._open) > MAX_ASKED:
            self._open.pop(next(iter(self._open)))
        return issued

    def renumber(self, message: dict[str, Any], connection: WorkerConnection, worker_session_id: str) -> bool:
        """Gives a worker session's request (``message``, changed in place) the id the client is
        to see, or its cancel of one the id the client saw. False: neither, left as it is."""
        if not isinstance(message.get("method"), str):
            return False  # an answer, or not JSON-RPC at all
        if "id" in message:
            message["id"] = self.ask(message["id"], connection, worker_session_id)
            return True
        params = message.get("params")
        if message.get("method") != CANCELLED or not isinstance(params, dict):
            return False
        issued = self._issued_for(params.get("requestId"), connection, worker_session_id)
        if issued is None:
            return False  # answered already, or forgotten: the client has nothing left to stop
        params["requestId"] = issued
        return True

    def _issued_for(self, request_id: Any, connection: WorkerConnection, worker_session_id: str) -> str | None:
        for issued, asker in self._open.items():
            if asker.request_id == request_id and asker.is_from(connection, worker_session_id):
                return issued
        return None

    @staticmethod
    def ours(request_id: Any) -> bool:
        """An id of this form was the router's for a worker's request (this table's or an older one's)."""
        return isinstance(request_id, str) and request_id.startswith(WORKER_ID_PREFIX)

    def take(self, request_id: Any) -> Asker | None:
        """Who asked under ``request_id``, forgotten from now on (None: not asked, or answered)."""
        return self._open.pop(request_id, None) if isinstance(request_id, str) else None

    def clear(self) -> None:
        """The worker, or its session, is gone: nobody waits for these answers any more."""
        self._open.clear()

    def __len__(self) -> int:
        return len(self._open)
