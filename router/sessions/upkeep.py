"""The manager's background upkeep: debounced state saves, exit detection, health checks,
idle reaping, the restart budget and retention. A mixin of SessionManager (router/manager.py),
kept apart so each file stays readable; it relies on the attributes declared below.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import anyio
from anyio.abc import TaskGroup

from router.http.errors import ServiceUnavailable
from router.http.proxy import WorkerConnection
from router.sessions import continuity as resume
from router.sessions.control import ControlError
from router.sessions.table import RECORD_STATE, Session, SessionTable, State
from workers.health import HEALTH_FAILURES, probe
from workers.supervisor import Supervisor, Worker

if TYPE_CHECKING:
    from router.operator.metrics import Metrics
    from router.record.recorder import Recorder
    from router.sessions.pool import WarmPool

log = logging.getLogger("mcp_router.sessions")

REAP_TICK_MAX: Final = 1.0
SAVE_DEBOUNCE: Final = 0.5  # a burst of calls is saved once, after it, never on the answer path
SAVE_TIMEOUT: Final = 5.0  # a wedged worker must not hold a reap or a shutdown for long
RETENTION_SWEEP: Final = 60.0


class Upkeep:
    supervisor: Supervisor
    recorder: Recorder | None
    metrics: Metrics | None
    sessions: SessionTable
    idle_timeout: float
    retention: float
    health_interval: float
    _tg: TaskGroup | None
    _save_due: dict[str, float]
    _storage: bool | None
    pool: WarmPool

    def _detach(self, session: Session, state: State) -> WorkerConnection | None:
        raise NotImplementedError

    async def _go_dormant(self, session: Session, state: State, force: bool = False) -> bool:
        raise NotImplementedError

    async def end(self, session: Session, state: State) -> None:
        raise NotImplementedError

    def _record_state(self, session: Session) -> None:
        if self.recorder is not None:
            self.recorder.session_state(session.id, RECORD_STATE[session.state])

    # -- state saving ----------------------------------------------------------------------------

    def _schedule_save(self, session: Session) -> None:
        if self._storage is False or self._tg is None:
            return
        pending = session.id in self._save_due
        self._save_due[session.id] = time.monotonic() + SAVE_DEBOUNCE
        if not pending:
            self._tg.start_soon(self._debounced_save, session)

    async def _debounced_save(self, session: Session) -> None:
        try:
            while True:
                wait = self._save_due.get(session.id, 0.0) - time.monotonic()
                if wait > 0 or session.in_flight:  # between calls, never during one
                    await anyio.sleep(max(wait, SAVE_DEBOUNCE if session.in_flight else 0.0))
                    continue
                break
            self._save_due.pop(session.id, None)
            async with session.lock:
                connection = session.connection
                if connection is not None:
                    await self._save(session, connection)
        finally:
            self._save_due.pop(session.id, None)

    async def _save(self, session: Session, connection: WorkerConnection) -> None:
        if not session.browser_used or not connection.worker.alive():
            return
        with anyio.move_on_after(SAVE_TIMEOUT):
            if self._storage is None:
                self._storage = await resume.storage_supported(connection.client, connection.worker)
            if not self._storage:
                return
            started = time.monotonic()
            try:
                await resume.save_state(
                    connection.client, connection.worker, self.supervisor.session_dir(session.id),
                    session.current_url,
                )  # fmt: skip
            except (ControlError, OSError) as exc:
                log.info("state save failed session=%s: %s", session.id, exc)
                return
            log.debug("state saved session=%s ms=%.0f", session.id, (time.monotonic() - started) * 1000)

    # -- supervision -----------------------------------------------------------------------------

    def _worker_exited(self, worker: Worker, returncode: int) -> None:
        session = self.sessions.get(worker.session_id)
        if session is None or worker.stopping:
            return
        connection = session.connection
        if connection is None or connection.worker is not worker:
            return
        log.warning(
            "worker exited session=%s pid=%d code=%s stderr=%r",
            worker.session_id, worker.pid, returncode, worker.stderr_tail()[-500:],
        )  # fmt: skip
        self._crashed(session)

    def _crashed(self, session: Session) -> None:
        connection = self._detach(session, State.CRASHED)
        session.crashed_at = time.monotonic()
        if self.metrics is not None:
            self.metrics.crashed()
        if connection is not None and self._tg is not None:
            self._tg.start_soon(connection.aclose)

    async def _check_health(self) -> None:
        while True:
            await anyio.sleep(self.health_interval)
            async with anyio.create_task_group() as tg:
                for session in self.sessions.with_worker():
                    tg.start_soon(self._check_one, session)

    async def _check_one(self, session: Session) -> None:
        connection = session.connection
        if connection is None:
            return
        healthy = await probe(connection.worker)
        if session.connection is not connection:
            return
        session.health_failures = 0 if healthy else session.health_failures + 1
        if session.health_failures >= HEALTH_FAILURES:
            log.warning("worker failed %d health checks session=%s; restarting", HEALTH_FAILURES, session.id)
            self._crashed(session)
            await self.supervisor.stop(session.id)

    async def _reap_idle(self) -> None:
        tick = min(REAP_TICK_MAX, max(self.idle_timeout / 4, 0.05))
        while True:
            await anyio.sleep(tick)
            now = time.monotonic()
            for session in self.sessions.with_worker():
                if session.state is State.LIVE and session.idle_for(now) >= self.idle_timeout and self._tg:
                    log.info("reaping idle session=%s idle_s=%.1f", session.id, session.idle_for(now))
                    self._tg.start_soon(self._go_dormant, session, State.REAPED)

    async def _expire_retained(self) -> None:
        """Dormant sessions past the retention end for good, in memory and on disk."""
        while True:
            cutoff = time.time() - self.retention
            for session in self.sessions.live():
                if session.dormant and session.last_activity < cutoff:
                    log.info("session expired session=%s", session.id)
                    await self.end(session, State.CLOSED)
            entries = await anyio.to_thread.run_sync(_session_dirs, self.supervisor.state_dir / "sessions")
            for path in entries:
                if (
                    self.sessions.get(path.name) is None
                    and not self.pool.owns(path.name)  # a warm worker's directory has no session file
                    and resume.last_active(path) < cutoff
                ):
                    await self.supervisor.forget(path.name)
                    if self.recorder is not None:
                        self.recorder.session_state(path.name, RECORD_STATE[State.CLOSED])
            await anyio.sleep(RETENTION_SWEEP)

    async def _restart_allowed(self, session: Session) -> None:
        """The restart budget after a crash: backoff, or 503 once the session is degraded."""
        delay = session.budget.next_delay()
        if delay is None:
            if session.state is not State.DEGRADED:
                session.state = State.DEGRADED
                self._record_state(session)
                log.warning("session degraded session=%s (restart budget spent)", session.id)
            raise ServiceUnavailable(
                "The browser worker of this session keeps failing; retry later",
                data={"session": session.id},
                retry_after=max(1, math.ceil(session.budget.retry_after())),
            )
        await anyio.sleep(max(0.0, session.crashed_at + delay - time.monotonic()))
        session.budget.record_restart()
        if self.metrics is not None:
            self.metrics.restarted()


def _session_dirs(root: Path) -> list[Path]:
    return list(root.iterdir()) if root.is_dir() else []
