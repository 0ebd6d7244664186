"""The sessions' front door: open, look up, serve, end. Like the MCP SDK's
StreamableHTTPSessionManager it owns its task group through ``async with manager.run()``.

A session id outlives its workers. ``open`` answers the handshake from the cache of what the
worker would answer (router/sessions/handshake.py) and spawns nothing: the first request that
needs a worker gets one (``ensure_worker``), and so does the first request after a reap, a crash,
a hibernation or a restart of the router (router/sessions/continuity.py). Only DELETE, the
retention or the user end a session for good.

The parts, each with its own concern: ``Admission`` (worker slots and spawning), ``WarmPool``
(workers spawned ahead), ``Continuity`` (taking workers up and letting them go),
``RequestServing`` (a worker for each client request) and ``Upkeep`` (the background loops).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from router.errors import ServiceUnavailable, SessionNotFound, TooManyRequests
from router.layout import STATE_FILE, StateLayout
from router.protocol.messages import ClientMessage
from router.sessions import statefiles
from router.sessions.admission import Admission, RateLimit
from router.sessions.bringup import BringUps, default_bring_ups, memory_below_floor, room_for_another_warm_worker
from router.sessions.browser_watch import BrowserWatches
from router.sessions.continuity import Continuity
from router.sessions.conversations import ConversationStore
from router.sessions.handshake import HandshakeCache, probe
from router.sessions.hosts import Hosts
from router.sessions.nodes import check_owner
from router.sessions.opened import record_opened
from router.sessions.pool import KEEP_WARM_EVERY, WarmPool
from router.sessions.renewal import renew_browser
from router.sessions.serving import RequestServing
from router.sessions.stats import ManagerStats, stats_of
from router.sessions.table import DORMANT, ENDED, RECORD_STATE, Session, SessionTable, State, check_session_id
from router.sessions.upkeep import Upkeep
from router.types import HANDSHAKE_VERSIONS
from workers.health import HEALTH_INTERVAL, RestartBudget
from workers.supervisor import Supervisor

if TYPE_CHECKING:
    from router.operator.metrics import Metrics
    from router.record.recorder import Recorder

log = logging.getLogger("mcp_router.sessions")

FULL_RETRY_AFTER: Final = 10
# New sessions cost the router nothing until they browse, but each one is remembered until the
# retention ends it: a flood of handshakes must not crowd out the sessions that are in use.
INITIALIZE_RATE: Final = 50.0  # a second, on average
INITIALIZE_BURST: Final = 200  # Claude Code starting many conversations and subagents at once
RATE_RETRY_AFTER: Final = 1
RESERVE_WINDOW: Final = 3600.0  # a conversation quiet for longer is not coming back soon
SHUTDOWN_SAVE_BUDGET: Final = 5.0  # all sessions' state saves at SIGTERM, together
DEFAULT_RETENTION: Final = 24 * 3600.0
# An initialize arriving during the start-up handshake probe waits this long for it (one worker's
# start and handshake, ~0.5 s for Playwright's).
PROBE_WAIT: Final = 10.0


class SessionManager:
    def __init__(
        self,
        *,
        supervisor: Supervisor,
        recorder: Recorder | None,
        handshakes: HandshakeCache,
        layout: StateLayout,
        idle_timeout: float,
        max_sessions: int,
        max_live_workers: int = 8,
        retention: float = DEFAULT_RETENTION,
        health_interval: float = HEALTH_INTERVAL,
        budget: tuple[int, float, tuple[float, ...]] = (3, 300.0, (1.0, 2.0, 4.0)),
        metrics: Metrics | None = None,
        warm_workers: int = 0,
        resume_reserve: int = 0,
        sessions_per_browser: int = 1,
        keep_warm_interval: float = KEEP_WARM_EVERY,
        bring_ups: int | None = None,
        probe_handshake: bool = True,
        node_id: str | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.recorder = recorder
        self.metrics = metrics
        self.handshakes = handshakes
        self.layout = layout
        self.max_sessions = max_sessions
        self.retention = retention
        self.budget = budget
        self.probe_handshake = probe_handshake
        self.node_id = node_id  # minted ids start "<node>."; other nodes' ids are 421
        self.sessions = SessionTable(node_id)
        self._probed = anyio.Event()  # the start-up probe is over (filled, failed or not needed)
        self._probe_id: str | None = None
        self.stopping = anyio.Event()  # set when the router begins shutting down
        self._loop: asyncio.AbstractEventLoop | None = None
        self.admission = Admission(supervisor, max_live_workers=max_live_workers, metrics=metrics)
        # Sessions sharing workers: the reserve keeps the last host up, empty, while one sleeps.
        self.hosts = None if sessions_per_browser <= 1 else Hosts(
            admission=self.admission, supervisor=supervisor, capacity=sessions_per_browser,
            idle_timeout=idle_timeout, health_interval=health_interval,
        )  # fmt: skip
        if self.hosts is not None:
            warm_workers = 0
            self.hosts.evict = self._hibernate_least_recent
            self.hosts.keep_last = lambda: self._reserve_demand() > 0 and not memory_below_floor()
        self.conversations = ConversationStore(layout, retention)
        self.initialize_rate = RateLimit(INITIALIZE_RATE, INITIALIZE_BURST)
        self.bring_ups = BringUps(bring_ups or default_bring_ups())
        self.continuity = Continuity(
            supervisor=supervisor,
            admission=self.admission,
            handshakes=handshakes,
            layout=layout,
            recorder=recorder,
            metrics=metrics,
            start_soon=self._start_soon,
            bring_ups=self.bring_ups,
            on_dormant=lambda: self.pool.wake(),
            conversations=self.conversations,
            hosts=self.hosts,
        )
        self.resume_reserve = max(0, resume_reserve)
        self.pool = WarmPool(
            admission=self.admission,
            supervisor=supervisor,
            size=warm_workers,
            start_soon=self._start_soon,
            extra_demand=self._reserve_demand if self.hosts is None else lambda: 0,
            bring_ups=self.bring_ups,
            spare_memory=room_for_another_warm_worker,
            memory_short=memory_below_floor,
            keep_warm_every=keep_warm_interval,
        )
        self.upkeep = Upkeep(
            sessions=self.sessions,
            continuity=self.continuity,
            supervisor=supervisor,
            layout=layout,
            recorder=recorder,
            metrics=metrics,
            idle_timeout=idle_timeout,
            retention=retention,
            health_interval=health_interval,
            end=self.end,
            owns_directory=self._owns_directory,
        )
        self.browsers = BrowserWatches(continuity=self.continuity, start_soon=self._start_soon)
        self.continuity.state_saver.on_page_crash = self.browsers.page_crashed
        self.requests = RequestServing(
            continuity=self.continuity, pool=self.pool, upkeep=self.upkeep, handshakes=handshakes,
            bring_ups=self.bring_ups, browsers=self.browsers,
        )  # fmt: skip
        # A warm worker goes before any session sleeps.
        self.admission.evictors = (self.pool.evict_one, self._hibernate_least_recent)

    def _reserve_demand(self) -> int:
        """Warm workers wanted for resumes: while a session that browsed sleeps (reaped, crashed,
        hibernated, a previous run's) and went quiet within the window, the next call of such a
        conversation, after a pause for reading or thinking, takes a browser that is already up."""
        if not self.resume_reserve:
            return 0
        return min(self.resume_reserve, self.sessions.sleeping_browsers(since=time.time() - RESERVE_WINDOW))

    def _owns_directory(self, worker_id: str) -> bool:
        """A worker directory with no session file that is not litter: a warm worker's, the probe's, a host's."""
        hosted = self.hosts is not None and self.hosts.owns(worker_id)
        return hosted or self.pool.owns(worker_id) or worker_id == self._probe_id

    def _start_soon(self, job: Callable[[], Awaitable[Any]]) -> None:
        self.upkeep.start_soon(job)

    # -- life cycle ------------------------------------------------------------------------------

    @asynccontextmanager
    async def run(self) -> AsyncIterator[SessionManager]:
        self._loop = asyncio.get_running_loop()
        self.stopping = anyio.Event()
        self._probed = anyio.Event()
        async with self.upkeep.run():
            if self.pool.size or (self.resume_reserve and self.hosts is None):
                self._start_soon(self.pool.refill)
            if self.hosts is not None:
                self._start_soon(self.hosts.run)
            if self.probe_handshake and not self.handshakes.versions() >= HANDSHAKE_VERSIONS:
                self._start_soon(self._probe_handshakes)
            else:
                self._probed.set()  # filled on disk already, or no probe wanted
            try:
                yield self
            finally:
                self.stopping.set()
                with anyio.CancelScope(shield=True):
                    await self._shutdown()

    def request_stop(self) -> None:
        """From a signal handler or another thread: end held streams so shutdown is not held up."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.stopping.set)

    async def _shutdown(self) -> None:
        """Save each live session's state and end its worker; the sessions stay resumable."""
        await self.pool.close()
        with anyio.move_on_after(SHUTDOWN_SAVE_BUDGET):
            async with anyio.create_task_group() as tg:
                for session in self.sessions.with_worker():
                    tg.start_soon(partial(self.continuity.go_dormant, session, State.HIBERNATED, force=True))
        # Whatever the budget cut short is still marked, and the supervisor ends its worker.
        for session in self.sessions.with_worker():
            self.continuity.detach(session, State.HIBERNATED)
        if self.hosts is not None:
            await self.hosts.close()

    async def _probe_handshakes(self) -> None:
        self._probe_id = "probe-" + secrets.token_hex(16)
        try:
            await probe(
                self.handshakes, HANDSHAKE_VERSIONS, supervisor=self.supervisor, admission=self.admission,
                worker_id=self._probe_id,
            )  # fmt: skip
        finally:
            self._probed.set()

    @property
    def handshake_probed(self) -> bool:
        return self._probed.is_set()

    # -- open / lookup / end ---------------------------------------------------------------------

    async def open(
        self, initialize: ClientMessage, *, response_mode: str, conversation: str | None = None
    ) -> tuple[Session, dict[str, Any]]:
        """A new session and the ``initialize`` result to answer with: from the handshake cache
        with no worker yet, or from a worker (a warm one, or spawned now when the cache cannot
        answer this protocol version). ``conversation``: the hashed key of the conversation it
        continues; that conversation's saved browser comes back at its first browser call."""
        if not self.initialize_rate.take():
            raise TooManyRequests("Too many new sessions at once; retry shortly", retry_after=RATE_RETRY_AFTER)
        if len(self.sessions.live()) >= self.max_sessions and not await self._evict_dormant():
            raise ServiceUnavailable(
                f"Too many sessions ({self.max_sessions}); retry later or end a session",
                retry_after=FULL_RETRY_AFTER,
            )
        params = initialize.params
        version = params.get("protocolVersion")
        if not self._probed.is_set():
            # The probe fills the cache in a moment, and holds a worker slot meanwhile: the only
            # one at --max-live-workers 1, where a spawn for this session would be refused.
            with anyio.move_on_after(PROBE_WAIT):
                await self._probed.wait()
        cached = self.handshakes.get(version) if isinstance(version, str) else None
        # A warm worker is taken by the first request that needs a worker, not by the handshake.
        warm = self.pool.take() if cached is None else None
        if warm is None and cached is None:
            self.admission.check_spawning()
        session = self.sessions.create(response_mode, params, budget=self._new_budget())
        self.pool.expect(session.initialize_params)
        session.conversation = conversation
        if conversation is not None and self.conversations.hand_to(conversation, self._dir(session), STATE_FILE):
            session.browser_used = session.inherits_browser = True
        statefiles.keep_session(self._dir(session), session)
        record_opened(self.recorder, session, None)
        if warm is None and cached is not None:
            log.info("session opened session=%s client=%s worker=lazy", session.id, session.client_info.get("name"))
            return session, cached["initialize"]
        started = time.monotonic()
        try:
            async with session.lock:
                if warm is not None:
                    result = await self.continuity.attach(
                        session, worker=warm.worker, control=warm.control, connection=warm.connection,
                        prepared=warm.client, prepared_stream=warm.stream, roots_wait=0,
                    )  # fmt: skip
                else:
                    result = await self.continuity.attach(session)
        except BaseException:
            self.sessions.forget(session.id)
            statefiles.forget_session_file(self._dir(session))
            raise
        log.info(
            "session opened session=%s client=%s worker=%s ms=%.0f",
            session.id, session.client_info.get("name"), "warm" if warm else "spawned",
            (time.monotonic() - started) * 1000,
        )  # fmt: skip
        return session, result

    def stats(self) -> ManagerStats:
        return stats_of(self)

    def accepting_sessions(self) -> bool:
        """Whether an ``initialize`` would be taken now (else 503 + Retry-After, so a balancer
        retries it on another node)."""
        return len(self.sessions.live()) < self.max_sessions or self.sessions.longest_unused(
            time.monotonic(), self.upkeep.idle_timeout
        ) is not None

    async def lookup(self, session_id: str) -> Session:
        """The session for a client's id, live or dormant (loaded from disk after a restart of the
        router): 400 if malformed, 421 if another node's, 404 if unknown (any id this router could
        not have minted among them), ended or past retention."""
        check_session_id(session_id)
        check_owner(session_id, self.node_id)
        session = self.sessions.get(session_id)
        if session is None:
            session = statefiles.session_from_disk(self.layout, session_id, self.retention, self._new_budget())
            if session is not None:
                log.info("session known from a previous run session=%s", session_id)
                self.pool.expect(session.initialize_params)
                session = self.sessions.add(session)
        if session is None or session.state in ENDED:
            raise SessionNotFound("Session not found: initialize a new session")
        return session

    async def end(self, session: Session, state: State) -> None:
        """Ends the session for good: the worker's MCP session, its process group, its files."""
        if session.state in ENDED:
            return
        session.state = state
        session.gone.set()
        self.sessions.forget(session.id)
        self.admission.release(session.id)
        # Before any await: a request arriving now must not load the session back from disk.
        statefiles.forget_session_file(self._dir(session))
        async with session.lock:  # a resume in progress finishes (and sees ENDED) first
            connection, session.connection = session.connection, None
            control, session.control = session.control, None
            session.worker_switched()
            shared = connection is not None and self.continuity.shares(connection.worker)
            if connection is not None:
                self.continuity.release_slot(connection.worker)
                if session.conversation is not None:  # the conversation's next session takes it up
                    await self.continuity.state_saver.save(session, connection, control)
                if (state is State.CLOSED or shared) and session.worker_session_id is not None:
                    await connection.delete_session(session.worker_session_id)
                await connection.aclose()
            if self.recorder is not None:
                self.recorder.session_state(session.id, RECORD_STATE[state])
                # The worker's snapshot files are read by the recorder; let it finish before they go.
                await self.recorder.flush()
            if connection is not None and shared:
                await self.continuity.end_worker(session, connection.worker)  # its place on the host
            elif connection is not None and connection.worker.session_id != session.id:
                await self.supervisor.forget(connection.worker.session_id)  # a warm worker it had taken
            await self.supervisor.stop(session.id)
            await self.supervisor.forget(session.id)
            self.admission.release(session.id)  # a resume that raced us may have taken it again
        if self.metrics is not None:
            self.metrics.ended(state.value)
        log.info("session ended session=%s reason=%s", session.id, state.value)

    async def hibernate(self, session: Session) -> bool:
        """Save the browser state and end the worker; the next request resumes the session."""
        return await self.continuity.go_dormant(session, State.HIBERNATED)

    async def renew_browser(self, session: Session) -> str:
        """create_new_session: a fresh browser (new worker, empty profile) under the same MCP
        session. Returns the new browser-session id, which the record links to this session."""
        return await renew_browser(self.continuity, session)

    async def _evict_dormant(self) -> bool:
        """Makes room among known ids by ending, for good, the longest-idle session that never had
        a worker (a health check's, or a handshake nobody followed up). A session that ever had
        a browser is never ended to make room for another client's: it only ever sleeps."""
        unused = self.sessions.longest_unused(time.monotonic(), self.upkeep.idle_timeout)
        if unused is None:
            return False
        await self.end(unused, State.CLOSED)
        return True

    async def _hibernate_least_recent(self, for_id: str) -> bool:
        victim = self.sessions.least_recent_idle(excluding=for_id)
        if victim is None:
            return False
        log.info("hibernating session=%s to make room for session=%s", victim.id, for_id)
        # Synchronous up to its first await: the slot is free before anyone else can look.
        return await self.continuity.go_dormant(victim, State.HIBERNATED)

    # -- helpers ---------------------------------------------------------------------------------

    def _dir(self, session: Session) -> Path:
        return self.layout.session_dir(session.id)

    def _new_budget(self) -> RestartBudget:
        max_restarts, window, backoff = self.budget
        return RestartBudget(max_restarts, window, backoff)


__all__ = ["DORMANT", "SessionManager"]
