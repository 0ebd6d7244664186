"""Session ids, states, in-flight counters and idle clocks. No I/O here."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from router.errors import BadRequest, SessionNotFound

if TYPE_CHECKING:
    from router.proxy import WorkerConnection

SESSION_ID_BYTES = 24  # 192 random bits, 32 URL-safe characters
MAX_SESSION_ID_LENGTH = 128
# Visible ASCII per the spec; anything else cannot be one of ours.
_SESSION_ID_RE = re.compile(r"[\x21-\x7e]+")


class State(Enum):
    STARTING = "starting"
    LIVE = "live"
    REAPED = "reaped"
    CLOSED = "closed"
    ERROR = "error"


ENDED = frozenset({State.REAPED, State.CLOSED, State.ERROR})


def mint_session_id() -> str:
    return secrets.token_urlsafe(SESSION_ID_BYTES)


def check_session_id(value: str) -> None:
    if len(value) > MAX_SESSION_ID_LENGTH or not _SESSION_ID_RE.fullmatch(value):
        raise BadRequest("Invalid Request: malformed Mcp-Session-Id header")


@dataclass(eq=False)
class Session:
    id: str
    response_mode: str = "full"
    state: State = State.STARTING
    created: float = field(default_factory=time.time)
    last_activity: float = field(default_factory=time.time)
    # Monotonic end of the last client request; idle time is measured from here.
    last_request_end: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    connection: WorkerConnection | None = None
    worker_session_id: str | None = None
    protocol_version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)

    @contextmanager
    def client_request(self) -> Iterator[None]:
        """Counts a client request as in flight; only these keep a worker from being reaped."""
        self.in_flight += 1
        self.last_activity = time.time()
        try:
            yield
        finally:
            self.in_flight -= 1
            self.last_request_end = time.monotonic()

    def idle_for(self, now: float) -> float:
        return 0.0 if self.in_flight else now - self.last_request_end


class SessionTable:
    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def create(self, response_mode: str = "full") -> Session:
        session_id = mint_session_id()
        while session_id in self._sessions:  # astronomically unlikely, but cheap to rule out
            session_id = mint_session_id()
        session = Session(session_id, response_mode=response_mode)
        self._sessions[session_id] = session
        return session

    def lookup(self, session_id: str) -> Session:
        """The live session for a client's id: 400 if malformed, 404 if unknown or ended."""
        check_session_id(session_id)
        session = self._sessions.get(session_id)
        if session is None or session.state in ENDED:
            raise SessionNotFound("Session not found: initialize a new session")
        return session

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def live(self) -> list[Session]:
        return [s for s in self._sessions.values() if s.state not in ENDED]

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
