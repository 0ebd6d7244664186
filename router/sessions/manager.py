"""Owns the sessions' lifecycles: open, resume, hibernate, reap, supervise, end.

A session id outlives its worker (issue 4). Reaping, hibernation, a crash or a restart of the
router only make a session dormant; its next request gets a new worker, the client's recorded
handshake and the saved browser state (router/resume.py). Only DELETE, the retention or the user
end a session for good. Like the MCP SDK's StreamableHTTPSessionManager, it owns its task group
through ``async with manager.run()``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio
from anyio.abc import TaskGroup

from router.http.errors import ServiceUnavailable, SessionNotFound, WorkerUnreachable
from router.http.messages import ClientMessage
from router.http.proxy import WorkerConnection
from router.sessions import continuity as resume
from router.sessions.control import ControlError, WorkerSession
from router.sessions.pool import WarmPool
from router.sessions.table import ENDED, RECORD_STATE, Session, SessionTable, State, check_session_id, mint_session_id
from router.sessions.upkeep import Upkeep
from workers._exceptions import SpawnError
from workers.health import HEALTH_INTERVAL, RestartBudget
from workers.supervisor import Supervisor, Worker

if TYPE_CHECKING:
    from router.operator.metrics import Metrics
    from router.record.recorder import Recorder

log = logging.getLogger("mcp_router.sessions")

FULL_RETRY_AFTER: Final = 10
SPAWN_RETRY_AFTER: Final = 5
BUSY_RETRY_AFTER: Final = 5  # every live worker is busy: one call is usually done by then
SHUTDOWN_SAVE_BUDGET: Final = 5.0  # all sessions' state saves at SIGTERM, together
SPAWN_FAILURE_LIMIT: Final = 3  # consecutive failures before initialize fails fast
SPAWN_COOLDOWN: Final = 10.0  # how long it fails fast before trying a spawn again
DEFAULT_RETENTION: Final = 24 * 3600.0


class SessionManager(Upkeep):
    def __init__(
        self,
        *,
        supervisor: Supervisor,
        recorder: Recorder | None,
        idle_timeout: float,
        max_sessions: int,
        max_live_workers: int = 8,
        retention: float = DEFAULT_RETENTION,
        health_interval: float = HEALTH_INTERVAL,
        budget: tuple[int, float, tuple[float, ...]] = (3, 300.0, (1.0, 2.0, 4.0)),
        metrics: Metrics | None = None,
        warm_workers: int = 0,
    ) -> None:
        self.supervisor = supervisor
        self.recorder = recorder
        self.metrics = metrics
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self.max_live_workers = max(1, max_live_workers)
        self.retention = retention
        self.health_interval = health_interval
        self.budget = budget
        self.sessions = SessionTable()
        self.stopping = anyio.Event()  # set when the router begins shutting down
        self._tg: TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: set[str] = set()  # sessions that hold, or are getting, a worker
        self._save_due: dict[str, float] = {}
        self._storage: bool | None = None  # does this kind of worker have the storage tools?
        self._spawn_failures = 0
        self._spawn_failed_at = 0.0
        self._spawn_error: SpawnError | None = None
        self.pool = WarmPool(self, warm_workers)  # router/pool.py: workers spawned ahead of demand

    # -- life cycle ------------------------------------------------------------------------------

    @asynccontextmanager
    async def run(self) -> AsyncIterator[SessionManager]:
        self._loop = asyncio.get_running_loop()
        self.stopping = anyio.Event()
        self.supervisor.add_exit_listener(self._worker_exited)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._reap_idle)
            tg.start_soon(self._check_health)
            tg.start_soon(self._expire_retained)
            if self.pool.size:
                tg.start_soon(self.pool.refill)
            try:
                yield self
            finally:
                self.stopping.set()
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self._shutdown()
                self._tg = None
        self.supervisor.remove_exit_listener(self._worker_exited)

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
                    tg.start_soon(self._go_dormant, session, State.HIBERNATED, True)
        # Whatever the budget cut short is still marked, and the supervisor ends its worker.
        for session in self.sessions.with_worker():
            self._detach(session, State.HIBERNATED)

    # -- open / lookup / end ---------------------------------------------------------------------

    async def open(self, initialize: ClientMessage, *, response_mode: str) -> Session:
        if not len(self.pool):
            self._check_spawning()
        if len(self.sessions.live()) >= self.max_sessions and not await self._evict_dormant():
            raise ServiceUnavailable(
                f"Too many sessions ({self.max_sessions}); retry later or end a session",
                retry_after=FULL_RETRY_AFTER,
            )
        # A warm worker, if one is ready: the session takes its id (and with it its slot).
        warm = self.pool.take()
        session = self.sessions.create(response_mode, session_id=None if warm is None else warm.id)
        session.budget = self._new_budget()
        params = initialize.params
        session.initialize_params = dict(params)
        info = params.get("clientInfo")
        session.client_info = info if isinstance(info, dict) else {}
        version = params.get("protocolVersion")
        session.protocol_version = version if isinstance(version, str) else None
        started = time.monotonic()
        if warm is not None and warm.connection is not None:
            connection = warm.connection
        else:
            try:
                connection = WorkerConnection(await self._spawn(session))
            except BaseException:
                self.sessions.forget(session.id)
                raise
        self._attach(session, connection)
        resume.write_session_file(self.supervisor.session_dir(session.id), resume.session_record(session))
        worker = connection.worker
        log.info(
            "session opened session=%s port=%d pid=%d client=%s warm=%s spawn_ms=%.0f",
            session.id, worker.port, worker.pid, session.client_info.get("name"), warm is not None,
            (time.monotonic() - started) * 1000,
        )  # fmt: skip
        return session

    async def lookup(self, session_id: str) -> Session:
        """The session for a client's id, live or dormant (loaded from disk after a restart of the
        router): 400 if malformed, 404 if unknown, ended or past retention."""
        check_session_id(session_id)
        session = self.sessions.get(session_id)
        if session is None:
            session = resume.session_from_disk(
                self.supervisor.session_dir(session_id), session_id, self.retention, self._new_budget()
            )
            if session is not None:
                log.info("session known from a previous run session=%s", session_id)
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
        self._slots.discard(session.id)
        # Before any await: a request arriving now must not load the session back from disk.
        resume.forget_session_file(self.supervisor.session_dir(session.id))
        async with session.lock:  # a resume in progress finishes (and sees ENDED) first
            connection, session.connection = session.connection, None
            if connection is not None:
                if state is State.CLOSED and session.worker_session_id is not None:
                    await connection.delete_session(session.worker_session_id)
                await connection.aclose()
            if self.recorder is not None:
                self.recorder.session_state(session.id, RECORD_STATE[state])
                # The worker's snapshot files are read by the recorder; let it finish before they go.
                await self.recorder.flush()
            await self.supervisor.stop(session.id)
            await self.supervisor.forget(session.id)
        if self.metrics is not None:
            self.metrics.ended(state.value)
        log.info("session ended session=%s reason=%s", session.id, state.value)

    async def end_by_id(self, session_id: str) -> bool:
        """``mcp-router sessions --end ID``: end a live, dormant or on-disk session for good."""
        try:
            session = await self.lookup(session_id)
        except (SessionNotFound, ValueError):
            return False
        await self.end(session, State.CLOSED)
        return True

    async def wait_gone(self, session: Session) -> None:
        """Returns once the session has ended for good or the router is stopping."""
        async with anyio.create_task_group() as tg:

            async def stopping() -> None:
                await self.stopping.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(stopping)
            await session.gone.wait()
            tg.cancel_scope.cancel()

    async def hibernate(self, session: Session) -> bool:
        """Save the browser state and end the worker; the next request resumes the session."""
        return await self._go_dormant(session, State.HIBERNATED)

    async def renew_browser(self, session: Session) -> str:
        """create_new_session: a fresh browser (new worker, empty profile) under the same MCP
        session. Returns the new browser-session id, which the record links to this session."""
        browser_session = mint_session_id()
        async with session.lock:
            connection = self._detach(session, State.HIBERNATED)
            if connection is not None:
                await connection.aclose()
                if self.recorder is not None:
                    await self.recorder.flush()  # the recorder reads the output dir's files first
            await self.supervisor.stop(session.id)
            await self.supervisor.forget(session.id)  # profile and saved state: cookies, storage
            session.browser_used = False
            session.current_url = None
            await self._resume(session)
        resume.write_session_file(self.supervisor.session_dir(session.id), resume.session_record(session))
        if self.recorder is not None and session.connection is not None:
            worker = session.connection.worker
            self.recorder.session_opened(
                browser_session,
                client_info=session.client_info,
                protocol_version=session.protocol_version,
                port=worker.port,
                pid=worker.pid,
                metadata={"browser_session_of": session.id},
                parent_id=session.id,
            )
        log.info("new browser session=%s browser_session=%s", session.id, browser_session)
        return browser_session

    async def _evict_dormant(self) -> bool:
        """Makes room among known ids by ending the longest-dormant session for good."""
        dormant = [s for s in self.sessions.live() if s.dormant]
        if not dormant:
            return False
        await self.end(min(dormant, key=lambda s: s.last_activity), State.CLOSED)
        return True

    # -- serving a request -----------------------------------------------------------------------

    @asynccontextmanager
    async def serving(self, session: Session, message: ClientMessage) -> AsyncIterator[None]:
        """A client request: counted in flight, given a worker (resuming if needed), and, when it
        was a browser tool call, followed by a debounced save of the browser state."""
        with session.client_request():
            await self.ensure_worker(session)
            yield
        if (message.tool_name or "").startswith("browser_") and session.connection is not None:
            session.browser_used = True
            self._schedule_save(session)

    async def ensure_worker(self, session: Session) -> None:
        connection = session.connection
        if connection is not None:
            if connection.worker.alive():
                return
            # Died a moment ago: the supervisor's exit listener runs only after its sweep.
            self._crashed(session)
        async with session.lock:
            if session.state in ENDED:
                raise SessionNotFound("Session not found: initialize a new session")
            if session.connection is None:
                await self._resume(session)

    async def replace_dead_worker(self, session: Session, connection: WorkerConnection) -> WorkerConnection:
        """The worker refused a connection: treat it as crashed (restart budget) and resume."""
        if session.connection is connection:
            self._crashed(session)
            await self.supervisor.stop(session.id)  # its exit fully handled before a respawn
        await self.ensure_worker(session)
        if session.connection is None:
            raise WorkerUnreachable("Worker not available for this session")
        return session.connection

    def on_tool_answer(self, session: Session, response: dict[str, Any]) -> bool:
        """Called with each tools/call answer: notes the page URL, and adds the resume notice to
        the first answer after a resume. True when ``response`` was changed."""
        result = response.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        if not isinstance(content, list):
            return False
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                url = resume.page_url(part["text"])
                if url is not None:
                    session.current_url = url
        if not session.resumed_notice:
            return False
        session.resumed_notice = False
        content.append({"type": "text", "text": resume.RESUMED_NOTICE})
        return True

    # -- workers: admission, spawn, resume, dormancy ---------------------------------------------

    def _check_spawning(self) -> None:
        """Router-wide: when spawning keeps failing (no node, no browser), say so at once."""
        error = self._spawn_error
        if (
            error is not None
            and self._spawn_failures >= SPAWN_FAILURE_LIMIT
            and time.monotonic() - self._spawn_failed_at < SPAWN_COOLDOWN
        ):
            raise ServiceUnavailable(
                f"Browser workers cannot be started right now: {error}",
                data={"stderr": error.stderr_tail},
                retry_after=math.ceil(SPAWN_COOLDOWN),
            )

    async def _admit(self, session: Session) -> None:
        """A worker slot under max_live_workers, hibernating the least recently used idle one."""
        while session.id not in self._slots:
            if len(self._slots) < self.max_live_workers:
                self._slots.add(session.id)
                return
            if await self.pool.evict_one():  # a warm worker goes before any session sleeps
                continue
            idle = [
                s for s in self.sessions.with_worker()
                if s is not session and s.state is State.LIVE and not s.in_flight
            ]  # fmt: skip
            if not idle:
                raise ServiceUnavailable(
                    f"All {self.max_live_workers} browser workers are busy; retry shortly",
                    retry_after=BUSY_RETRY_AFTER,
                )
            victim = min(idle, key=lambda s: s.last_request_end)
            log.info("hibernating session=%s to make room for session=%s", victim.id, session.id)
            # Synchronous up to its first await: the slot is free before anyone else can look.
            await self._go_dormant(victim, State.HIBERNATED)

    async def _spawn(self, session: Session) -> Worker:
        await self._admit(session)
        started = time.monotonic()
        try:
            worker = await self.supervisor.spawn(session.id)
        except SpawnError as exc:
            if self.metrics is not None:
                self.metrics.spawn_failed()
            self._slots.discard(session.id)
            self._spawn_failures += 1
            self._spawn_failed_at = time.monotonic()
            self._spawn_error = exc
            log.warning("spawn failed session=%s: %s", session.id, exc)
            raise ServiceUnavailable(
                f"Could not start a browser worker: {exc}",
                data={"stderr": exc.stderr_tail},
                retry_after=SPAWN_RETRY_AFTER,
            ) from None
        except BaseException:
            self._slots.discard(session.id)
            raise
        self._spawn_failures = 0
        if self.metrics is not None:
            self.metrics.spawned(time.monotonic() - started)
        return worker

    async def _resume(self, session: Session) -> None:
        """A new worker for a dormant session: same id, same port, the client's handshake, and its
        browser state. Called with ``session.lock`` held."""
        started = time.monotonic()
        previous = session.state
        if previous in (State.CRASHED, State.DEGRADED):
            await self._restart_allowed(session)
        worker = await self._spawn(session)
        spawned = time.monotonic()
        connection = WorkerConnection(worker)
        restored = False
        try:
            client_session = WorkerSession(connection.client, worker.url, worker.host_header)
            session.worker_session_id = await client_session.open(session.initialize_params or None)
            handshake = time.monotonic()
            if session.browser_used:
                try:
                    restored = await resume.restore_state(
                        client_session, worker, self.supervisor.session_dir(session.id)
                    )
                except ControlError as exc:  # a page without its cookies beats no page at all
                    log.warning("state restore failed session=%s: %s", session.id, exc)
        except ControlError as exc:
            await connection.aclose()
            self._slots.discard(session.id)
            await self.supervisor.stop(session.id)
            session.crashed_at = time.monotonic()
            raise WorkerUnreachable(
                f"Could not resume the session's browser worker: {exc}",
                data={"session": session.id, "stderr": worker.stderr_tail()},
            ) from None
        if session.state in ENDED:  # ended (DELETE, --end) while we were resuming
            await connection.aclose()
            return
        self._attach(session, connection)
        session.resumed_notice = restored
        if self.metrics is not None:
            self.metrics.resumed()
        done = time.monotonic()
        log.info(
            "session resumed session=%s from=%s restored=%s resume_ms=%.0f spawn_ms=%.0f handshake_ms=%.0f "
            "restore_ms=%.0f",
            session.id, previous.value, restored, (done - started) * 1000, (spawned - started) * 1000,
            (handshake - spawned) * 1000, (done - handshake) * 1000,
        )  # fmt: skip

    def _attach(self, session: Session, connection: WorkerConnection) -> None:
        session.connection = connection
        session.state = State.LIVE
        session.health_failures = 0
        worker = connection.worker
        if self.recorder is not None:
            self.recorder.session_opened(
                session.id,
                client_info=session.client_info,
                protocol_version=session.protocol_version,
                port=worker.port,
                pid=worker.pid,
                metadata={"initialize": session.initialize_params, "response_mode": session.response_mode},
            )

    def _detach(self, session: Session, state: State) -> WorkerConnection | None:
        """Synchronous, so nobody can pick the same session between the check and the change."""
        connection, session.connection = session.connection, None
        session.worker_session_id = None
        session.state = state
        self._slots.discard(session.id)
        self._record_state(session)
        return connection

    async def _go_dormant(self, session: Session, state: State, force: bool = False) -> bool:
        """Reap or hibernate: save the browser state, end the worker, keep the id and profile."""
        if session.connection is None or (session.in_flight and not force):
            return False
        connection = self._detach(session, state)
        assert connection is not None
        async with session.lock:
            await self._save(session, connection)
            await connection.aclose()
            if self.recorder is not None:
                await self.recorder.flush()  # the recorder reads the output dir's files first
            await self.supervisor.stop(session.id)
            resume.clear_output(connection.worker.output_dir)
            resume.write_session_file(self.supervisor.session_dir(session.id), resume.session_record(session))
        if self.metrics is not None:
            self.metrics.ended(state.value)
        log.info("session dormant session=%s reason=%s", session.id, state.value)
        return True

    # -- helpers ---------------------------------------------------------------------------------

    def _new_budget(self) -> RestartBudget:
        max_restarts, window, backoff = self.budget
        return RestartBudget(max_restarts, window, backoff)
