"""Session ids, states, in-flight counters and idle clocks. No I/O here."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio

from router.errors import BadRequest
from router.sessions.asked import WorkerQuestions
from router.sessions.outbox import Outbox
from router.sessions.roots import ClientRoots, declares_roots
from router.sessions.unrestored import Unrestored
from router.types import JsonRpcId
from workers.health import RestartBudget

if TYPE_CHECKING:
    from router.sessions.control import ControlSession
    from router.sessions.prepared_stream import PreparedStream
    from router.upstream.client import UpstreamResponse
    from router.upstream.connection import WorkerConnection

SESSION_ID_BYTES = 24  # 192 random bits, 32 URL-safe characters
MAX_SESSION_ID_LENGTH = 128
NODE_SEPARATOR = "."  # never in a random part (URL-safe base64) nor in a node id
# Visible ASCII per the spec; anything else cannot be one of ours.
_SESSION_ID_RE = re.compile(r"[\x21-\x7e]+")
# What mint_session_id produces: the only ids ever looked up on disk (no "/" or ".."): an
# optional node id and one "." (router/sessions/nodes.py), then the random part.
MINTED_ID_RE = re.compile(r"(?=.{16,128}\Z)(?:[A-Za-z0-9][A-Za-z0-9_-]*\.)?[A-Za-z0-9_-]{16,}")


class State(Enum):
    # Handshake answered by the router; no worker until a request needs one (lazy start).
    NEW = "new"
    STARTING = "starting"
    LIVE = "live"
    # Dormant: no worker now, but the id stays valid and the next request resumes it.
    REAPED = "reaped"  # idle past the timeout
    HIBERNATED = "hibernated"  # made room under the live-worker cap, or the router shut down
    CRASHED = "crashed"  # the worker died or failed its health checks; resuming costs restart budget
    INTERRUPTED = "interrupted"  # belonged to a previous run of the router
    DEGRADED = "degraded"  # restart budget spent: 503 + Retry-After until the window reopens
    # Ended for good: 404 from then on.
    CLOSED = "closed"
    ERROR = "error"


ENDED = frozenset({State.CLOSED, State.ERROR})
# States of a session that may never have used a browser (``browser_used`` tells).
UNBROWSED = frozenset({State.NEW, State.INTERRUPTED})
DORMANT = frozenset({State.REAPED, State.HIBERNATED, State.CRASHED, State.INTERRUPTED, State.DEGRADED})
# The record's vocabulary (router/record/schema.py) for each in-memory state.
RECORD_STATE = {
    State.NEW: "active",
    State.STARTING: "active",
    State.LIVE: "active",
    State.REAPED: "reaped",
    State.HIBERNATED: "hibernated",
    State.CRASHED: "degraded",
    State.INTERRUPTED: "interrupted",
    State.DEGRADED: "degraded",
    State.CLOSED: "closed",
    State.ERROR: "error",
}


def mint_session_id(node_id: str | None = None) -> str:
    """Never with a leading "-": `mcp-router show ID` would read such an id as an option. With a
    node id, ``<node>.<random>``: a balancer routes by that prefix (node ids start with a letter
    or digit, router/sessions/nodes.py)."""
    if node_id:
        return f"{node_id}{NODE_SEPARATOR}{secrets.token_urlsafe(SESSION_ID_BYTES)}"
    while True:
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        if not session_id.startswith("-"):
            return session_id


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
    connection: WorkerConnection | None = None
    worker_session_id: str | None = None  # the client's (replayed) MCP session on the worker
    control: ControlSession | None = None  # the router's own MCP session on the worker, no capabilities
    # Set (and replaced) whenever the worker changes, so a held GET stream follows it.
    worker_changed: anyio.Event = field(default_factory=anyio.Event)
    # Set once the client's GET stream is joined to the current worker's (see worker_switched).
    relay_ready: anyio.Event = field(default_factory=anyio.Event)
    # The worker session the client's GET stream found gone (the worker answered its GET with 404):
    # the next request reopens one at once (serving.py) instead of waiting for a relay that cannot
    # stand, and ``relay_lost`` wakes one that waits already.
    lost_worker_session: str | None = None
    relay_lost: anyio.Event = field(default_factory=anyio.Event)
    # The requests the worker sent the client (pings, roots/list), under the ids the client saw.
    asked: WorkerQuestions = field(default_factory=WorkerQuestions)
    # The client's requests in flight, by id, and which of them it cancelled meanwhile.
    requests: ClientRequests = field(default_factory=lambda: ClientRequests())
    stream: StreamSlot = field(default_factory=lambda: StreamSlot())
    protocol_version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    # Continuity: what a new worker needs to take the session up (router/sessions/continuity.py).
    initialize_params: dict[str, Any] = field(default_factory=dict)
    browser_used: bool = False  # a tool was called: there may be browser state worth saving
    # The hashed key of the conversation it continues (router/sessions/conversations.py), and
    # whether its first worker restores that conversation's browser ("conversation" resumed).
    conversation: str | None = None
    inherits_browser: bool = False
    state_saved_at: float = 0.0  # monotonic: the last debounced save of its browser state
    state_digest: bytes | None = None  # of what its state.json holds: an unchanged save writes nothing
    current_url: str | None = None  # last "- Page URL:" of the client's answers
    current_title: str | None = None  # and its "- Page Title:" (the dashboard shows them)
    # The worker whose browser lost that page to a crash (page_crash.py): its saves put the page
    # back, and it is ended so the next call resumes on it.
    page_lost_on: WorkerConnection | None = None
    # The frame prefix of the refs the model last saw ("f2e3" -> 2): the current tab's document
    # count, which a restore reproduces so that those refs resolve again. A navigation's refs are
    # only in its snapshot file: read when a save needs the frame (resume_notice.settled_ref_frame),
    # not with every navigation.
    ref_frame: int = 0
    ref_frame_file: Callable[[], str | None] | None = None
    resumed_notice: str | None = None  # the next tool answer tells the client why the page reloaded
    unrestored: Unrestored | None = None  # what its worker's resume left out, kept through saves
    crashed_at: float = 0.0  # monotonic; backoff before a restart counts from here
    # Only its page crashed (page_crash.py): the worker and browser were fine, so the restart
    # takes no backoff (it is still counted: a page that crashes on every load degrades it).
    page_crash_only: bool = False
    health_failures: int = 0
    budget: RestartBudget = field(default_factory=RestartBudget)
    # Serialises getting and giving up a worker (resume, reap, hibernate, save) for this session.
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    gone: anyio.Event = field(default_factory=anyio.Event)  # set once it has ended for good
    # The router's own notifications for the client's GET stream, and its resource subscriptions.
    outbox: Outbox = field(default_factory=Outbox)
    roots: ClientRoots = field(default_factory=ClientRoots)  # the client's, as the router asked them
    # A worker's GET stream held by the router (answering its pings) until the client's stream
    # takes it to relay (prepared_stream.py).
    adopted_stream: tuple[WorkerConnection, PreparedStream] | None = None
    # The worker's GET stream a client stream let go of when a new one took over (session_stream.py).
    parked_stream: ParkedStream | None = None
    # The worker's session made its first call with the client's roots, given by the router: the
    # worker will not ask the client for them.
    worker_has_roots: bool = False

    def ask_roots(self) -> None:
        """Asks the client its roots on its GET stream (held), unless known or asked already."""
        if self.stream.held and declares_roots(self.initialize_params):
            question = self.roots.question()
            if question is not None:
                self.outbox.request(question)

    def take_adopted_stream(self, connection: WorkerConnection) -> PreparedStream | None:
        """The held stream of ``connection``'s worker, for the relay of that worker only: one
        of another worker (a relay that started before the session changed worker) stays, read
        and answered, until its own relay or ``drop_adopted_stream`` ends it."""
        adopted = self.adopted_stream
        if adopted is None or adopted[0] is not connection:
            return None
        self.adopted_stream = None
        return adopted[1]

    def take_parked_stream(self, connection: WorkerConnection, worker_session_id: str) -> ParkedStream | None:
        """The parked stream of this worker session, for its next relay; one of another worker
        session (the session moved on meanwhile) is closed."""
        parked, self.parked_stream = self.parked_stream, None
        if parked is None or parked.of(connection, worker_session_id):
            return parked
        parked.upstream.close()
        return None

    def drop_adopted_stream(self) -> PreparedStream | None:
        """The held stream nobody will relay any more (the session left that worker or that
        worker session), for the caller to close."""
        adopted, self.adopted_stream = self.adopted_stream, None
        return None if adopted is None else adopted[1]

    def crashed(self, *, page_only: bool = False) -> None:
        """Its worker ended as a crash just now: the restart budget's backoff counts from here."""
        self.crashed_at = time.monotonic()
        self.page_crash_only = page_only

    def worker_switched(self) -> None:
        """Wakes whoever follows the session's worker (the client's GET stream)."""
        self.worker_changed.set()
        self.worker_changed = anyio.Event()
        self.relay_ready = anyio.Event()
        self.relay_lost = anyio.Event()

    def worker_session_lost(self, worker_session_id: str) -> None:
        """The worker answered 404 for ``worker_session_id``: noted if it is still the current one."""
        if worker_session_id == self.worker_session_id:
            self.lost_worker_session = worker_session_id
            self.relay_lost.set()

    @property
    def knows_worker_session_lost(self) -> bool:
        return self.worker_session_id is not None and self.lost_worker_session == self.worker_session_id

    @contextmanager
    def client_request(self, request_id: JsonRpcId) -> Iterator[None]:
        """A client request in flight, from its arrival to its answer: only these keep a worker
        from being reaped. A second one under an id in flight is refused (ClientRequests)."""
        with self.requests.in_flight(request_id):
            self.last_activity = time.time()
            try:
                yield
            finally:
                self.last_request_end = time.monotonic()

    @property
    def in_flight(self) -> int:
        return len(self.requests)

    def idle_for(self, now: float) -> float:
        return 0.0 if self.in_flight else now - self.last_request_end

    @property
    def dormant(self) -> bool:
        return self.state in DORMANT


class ClientRequests:
    """The ids of the client's requests in flight on a session. A second request under an id in
    flight is refused: the worker's SDK would send the first one's answer to the second's stream,
    and the first would wait for ever. A ``notifications/cancelled`` marks its id, so a request
    still waiting for a worker (a resume, a dead worker's retry, the relay) is never sent."""

    def __init__(self) -> None:
        self._cancelled: dict[JsonRpcId, bool] = {}

    @contextmanager
    def in_flight(self, request_id: JsonRpcId) -> Iterator[None]:
        if request_id in self._cancelled:
            raise BadRequest(
                f"Invalid Request: a request with id {request_id!r} is already in flight on this session",
                data={"id": request_id},
            )
        self._cancelled[request_id] = False
        try:
            yield
        finally:
            del self._cancelled[request_id]

    def cancel(self, request_id: Any) -> None:
        """The client gave up on ``request_id`` (any JSON: a notification's params are not checked);
        an id not in flight (answered already) is ignored."""
        if isinstance(request_id, str | int) and not isinstance(request_id, bool) and request_id in self._cancelled:
            self._cancelled[request_id] = True

    def cancelled(self, request_id: JsonRpcId) -> bool:
        return self._cancelled.get(request_id, False)

    def __contains__(self, request_id: object) -> bool:
        """``request_id`` is in flight (any JSON: what is not an id is not)."""
        return isinstance(request_id, str | int) and not isinstance(request_id, bool) and request_id in self._cancelled

    def __len__(self) -> int:
        return len(self._cancelled)


@dataclass(frozen=True, slots=True)
class ParkedStream:
    """A worker session's GET stream between two client streams, with what was read of it and
    not yet relayed (``rest``, as the worker sent it)."""

    connection: WorkerConnection
    worker_session_id: str
    upstream: UpstreamResponse
    rest: bytes

    def of(self, connection: WorkerConnection, worker_session_id: str) -> bool:
        return self.connection is connection and self.worker_session_id == worker_session_id


class StreamSlot:
    """The client's one GET stream. A new GET takes the slot over: the old holder is cancelled and
    has let go of the worker's stream (a worker refuses a second one) before the new one starts."""

    def __init__(self) -> None:
        self._scope: anyio.CancelScope | None = None
        self._released = anyio.Event()
        self._released.set()
        self._claimed = anyio.Event()  # set while a stream holds the slot
        self._taking_over = False

    @property
    def held(self) -> bool:
        return self._scope is not None

    async def opened(self) -> None:
        """Returns once a stream holds the slot (at once if one does)."""
        await self._claimed.wait()

    @property
    def taking_over(self) -> bool:
        """A new stream waits for the holder to let go: the holder is not simply ending."""
        return self._taking_over

    async def claim(self, scope: anyio.CancelScope) -> None:
        while self._scope is not None:
            self._taking_over = True
            self._scope.cancel()
            await self._released.wait()
        self._taking_over = False
        self._scope = scope
        self._released = anyio.Event()
        self._claimed.set()

    def release(self, scope: anyio.CancelScope) -> None:
        if self._scope is scope:
            self._scope = None
            self._released.set()
            self._claimed = anyio.Event()


class SessionTable:
    def __init__(self, node_id: str | None = None) -> None:
        self._sessions: dict[str, Session] = {}
        self.node_id = node_id

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def create(
        self, response_mode: str = "full", initialize: dict[str, Any] | None = None, *,
        budget: RestartBudget | None = None,
    ) -> Session:
        """A new session under a freshly minted id, with what its client's ``initialize`` said
        (kept for its workers' handshakes and the record)."""
        session_id = mint_session_id(self.node_id)
        while session_id in self._sessions:  # astronomically unlikely, but cheap to rule out
            session_id = mint_session_id(self.node_id)
        params = initialize or {}
        info, version = params.get("clientInfo"), params.get("protocolVersion")
        session = Session(
            session_id, response_mode=response_mode, state=State.NEW, initialize_params=dict(params),
            client_info=info if isinstance(info, dict) else {},
            protocol_version=version if isinstance(version, str) else None, budget=budget or RestartBudget(),
        )  # fmt: skip
        self._sessions[session_id] = session
        return session

    def add(self, session: Session) -> Session:
        """A session known from disk (a previous run's), or the one already in the table."""
        return self._sessions.setdefault(session.id, session)

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def live(self) -> list[Session]:
        """Every session whose id is still valid, with or without a worker."""
        return [s for s in self._sessions.values() if s.state not in ENDED]

    def with_worker(self) -> list[Session]:
        return [s for s in self._sessions.values() if s.connection is not None]

    # Who makes room, and who will be back: the lifecycle acts, the table only answers.

    def longest_unused(self, now: float, idle_for: float) -> Session | None:
        """The longest-idle session that never used a browser, idle for at least ``idle_for``: new
        in this run, or loaded from a previous run's files with no browser state."""
        unused = [
            s for s in self.live()
            if s.state in UNBROWSED and not s.browser_used and s.idle_for(now) >= idle_for
        ]  # fmt: skip
        return min(unused, key=lambda s: s.last_activity) if unused else None

    def least_recent_idle(self, excluding: str) -> Session | None:
        """The live session with a worker whose last request ended longest ago, none in flight."""
        idle = [s for s in self.with_worker() if s.id != excluding and s.state is State.LIVE and not s.in_flight]
        return min(idle, key=lambda s: s.last_request_end) if idle else None

    def sleeping_browsers(self, since: float) -> int:
        """Dormant sessions that browsed and were active after ``since`` (wall time)."""
        return sum(1 for s in self.live() if s.dormant and s.browser_used and s.last_activity >= since)

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
