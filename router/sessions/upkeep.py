"""The sessions' background upkeep: debounced state saves, exit detection, health checks, idle
reaping, the restart budget and retention. One task group, owned through ``async with run()``;
every loop survives its own failures (logged), so one bad worker cannot stop the others' upkeep.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final

import anyio
from anyio.abc import TaskGroup

from router.errors import ServiceUnavailable
from router.layout import StateLayout
from router.sessions import statefiles
from router.sessions.continuity import Continuity
from router.sessions.table import RECORD_STATE, Session, SessionTable, State
from workers.health import HEALTH_FAILURES, probe
from workers.supervisor import Supervisor, Worker

if TYPE_CHECKING:
    from router.operator.metrics import Metrics
    from router.record.recorder import Recorder

log = logging.getLogger("mcp_router.upkeep")

REAP_TICK_MAX: Final = 1.0
SAVE_DEBOUNCE: Final = 0.5  # a burst of calls is saved once, after it, never on the answer path
# Between two debounced saves of one session: a save costs the worker two tool calls, and a
# crash should lose seconds of cookies and tabs at most (going dormant always saves).
SAVE_MIN_INTERVAL: Final = 5.0
RETENTION_SWEEP: Final = 60.0
LOOP_ERROR_BACKOFF: Final = 1.0


class Upkeep:
    def __init__(
        self,
        *,
        sessions: SessionTable,
        continuity: Continuity,
        supervisor: Supervisor,
        layout: StateLayout,
        recorder: Recorder | None,
        metrics: Metrics | None,
        idle_timeout: float,
        retention: float,
        health_interval: float,
        end: Callable[[Session, State], Awaitable[None]],
        owns_directory: Callable[[str], bool],
    ) -> None:
        self.sessions = sessions
        self.continuity = continuity
        self.supervisor = supervisor
        self.layout = layout
        self.recorder = recorder
        self.metrics = metrics
        self.idle_timeout = idle_timeout
        self.retention = retention
        self.health_interval = health_interval
        self._end = end
        self._owns_directory = owns_directory
        self._save_due: dict[str, float] = {}
        self._tg: TaskGroup | None = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[Upkeep]:
        self.supervisor.add_exit_listener(self._worker_exited)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._forever, "reaping", self._reap_idle)
                tg.start_soon(self._forever, "health checks", self._check_health)
                tg.start_soon(self._forever, "retention", self._expire_retained)
                try:
                    yield self
                finally:
                    self._tg = None
                    tg.cancel_scope.cancel()
        finally:
            self.supervisor.remove_exit_listener(self._worker_exited)

    def start_soon(self, job: Callable[[], Awaitable[object]]) -> None:
        """A background job that logs its own failure instead of taking the upkeep down."""
        if self._tg is not None:
            self._tg.start_soon(self._guarded, job)

    async def _guarded(self, job: Callable[[], Awaitable[object]]) -> None:
        try:
            await job()
        except Exception:
            log.exception("background job failed: %r", job)

    async def _forever(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await loop()
            except Exception:
                log.exception("upkeep loop %r failed; restarting it", name)
                await anyio.sleep(LOOP_ERROR_BACKOFF)

    # -- state saving ----------------------------------------------------------------------------

    def schedule_save(self, session: Session) -> None:
        if self._tg is None:
            return
        pending = session.id in self._save_due
        now = time.monotonic()
        self._save_due[session.id] = max(now + SAVE_DEBOUNCE, session.state_saved_at + SAVE_MIN_INTERVAL)
        if not pending:
            self.start_soon(lambda: self._debounced_save(session))

    async def _debounced_save(self, session: Session) -> None:
        claimed = False
        try:
            while True:
                wait = self._save_due.get(session.id, 0.0) - time.monotonic()
                if wait > 0 or session.in_flight:  # between calls, never during one
                    await anyio.sleep(max(wait, SAVE_DEBOUNCE if session.in_flight else 0.0))
                    continue
                break
            # From here a call that ends schedules a save of its own, after this one.
            self._save_due.pop(session.id, None)
            claimed = True
            async with session.lock:
                connection = session.connection
                if connection is not None:
                    session.state_saved_at = time.monotonic()
                    await self.continuity.state_saver.save(session, connection, session.control)
        finally:
            if not claimed:  # else the entry, if any, is the next save's
                self._save_due.pop(session.id, None)

    # -- supervision -----------------------------------------------------------------------------

    def _worker_exited(self, worker: Worker, returncode: int) -> None:
        if worker.stopping:
            return
        # Usually under the session's id; a warm worker keeps its own, a host carries several.
        sessions = [s for s in self.sessions.with_worker() if s.connection and s.connection.worker is worker]
        if sessions:
            log.warning(
                "worker exited worker=%s sessions=%d pid=%d code=%s stderr=%r",
                worker.session_id, len(sessions), worker.pid, returncode, worker.stderr_tail()[-500:],
            )  # fmt: skip
        for session in sessions:
            self.continuity.crashed(session)

    async def _check_health(self) -> None:
        while True:
            await anyio.sleep(self.health_interval)
            async with anyio.create_task_group() as tg:
                for session in self.sessions.with_worker():
                    tg.start_soon(self._check_one, session)

    async def _check_one(self, session: Session) -> None:
        connection = session.connection
        if connection is None or self.continuity.shares(connection.worker):  # a host is checked whole
            return
        healthy = await probe(connection.worker)
        if session.connection is not connection:
            return
        session.health_failures = 0 if healthy else session.health_failures + 1
        if session.health_failures >= HEALTH_FAILURES:
            log.warning("worker failed %d health checks session=%s; restarting", HEALTH_FAILURES, session.id)
            self.continuity.crashed(session)
            await self.continuity.end_worker(session, connection.worker)

    async def _reap_idle(self) -> None:
        tick = min(REAP_TICK_MAX, max(self.idle_timeout / 4, 0.05))
        while True:
            await anyio.sleep(tick)
            now = time.monotonic()
            for session in self.sessions.with_worker():
                if session.state is State.LIVE and session.idle_for(now) >= self.idle_timeout:
                    log.info("reaping idle session=%s idle_s=%.1f", session.id, session.idle_for(now))
                    self.start_soon(partial(self.continuity.go_dormant, session, State.REAPED))

    async def _expire_retained(self) -> None:
        """Dormant sessions past the retention end for good, in memory and on disk."""
        while True:
            cutoff = time.time() - self.retention
            for session in self.sessions.live():
                if session.dormant and session.last_activity < cutoff:
                    log.info("session expired session=%s", session.id)
                    await self._end(session, State.CLOSED)
            entries = await anyio.to_thread.run_sync(_session_dirs, self.layout.sessions_root)
            for path in entries:
                if (
                    self.sessions.get(path.name) is None
                    and not self._owns_directory(path.name)  # a warm worker's directory has no session file
                    and self.supervisor.get(path.name) is None  # nor has a warm worker a session took
                    and statefiles.last_active(path) < cutoff
                ):
                    await self.supervisor.forget(path.name)
                    if self.recorder is not None:
                        self.recorder.session_state(path.name, RECORD_STATE[State.CLOSED])
            if self.continuity.conversations is not None:
                await anyio.to_thread.run_sync(self.continuity.conversations.prune)
            await anyio.sleep(RETENTION_SWEEP)

    async def restart_allowed(self, session: Session) -> None:
        """The restart budget after a crash: backoff, or 503 once the session is degraded."""
        delay = session.budget.next_delay()
        if delay is None:
            if session.state is not State.DEGRADED:
                session.state = State.DEGRADED
                self.continuity.record_state(session)
                log.warning("session degraded session=%s (restart budget spent)", session.id)
            raise ServiceUnavailable(
                "The browser worker of this session keeps failing; retry later",
                data={"session": session.id},
                retry_after=max(1, math.ceil(session.budget.retry_after())),
            )
        if not session.page_crash_only:  # the browser is fine: nothing to wait out
            await anyio.sleep(max(0.0, session.crashed_at + delay - time.monotonic()))
        session.budget.record_restart()
        if self.metrics is not None:
            self.metrics.restarted()


def _session_dirs(root: Path) -> list[Path]:
    return list(root.iterdir()) if root.is_dir() else []
