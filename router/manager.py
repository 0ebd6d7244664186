"""Owns the sessions' lifecycles: open (spawn), end, and reap the idle ones.

Like the MCP SDK's StreamableHTTPSessionManager, it owns its task group through
`async with manager.run()`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import anyio
from anyio.abc import TaskGroup

from router.errors import ServiceUnavailable
from router.messages import ClientMessage
from router.proxy import WorkerConnection
from router.sessions import ENDED, Session, SessionTable, State
from workers._exceptions import SpawnError
from workers.supervisor import Supervisor, Worker

if TYPE_CHECKING:
    from router.recorder import Recorder

log = logging.getLogger("mcp_router.sessions")

REAP_TICK_MAX: Final = 1.0
FULL_RETRY_AFTER: Final = 10
SPAWN_RETRY_AFTER: Final = 5


class SessionManager:
    def __init__(
        self,
        *,
        supervisor: Supervisor,
        recorder: Recorder | None,
        idle_timeout: float,
        max_sessions: int,
    ) -> None:
        self.supervisor = supervisor
        self.recorder = recorder
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self.sessions = SessionTable()
        self._tg: TaskGroup | None = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[SessionManager]:
        self.supervisor.add_exit_listener(self._worker_exited)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._reap_idle)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    for session in self.sessions.live():
                        await self.end(session, State.CLOSED)
                self._tg = None

    async def open(self, initialize: ClientMessage, *, response_mode: str) -> Session:
        if len(self.sessions.live()) >= self.max_sessions:
            raise ServiceUnavailable(
                f"Too many sessions ({self.max_sessions}); retry later or end a session",
                retry_after=FULL_RETRY_AFTER,
            )
        session = self.sessions.create(response_mode)
        params = initialize.params
        info = params.get("clientInfo")
        session.client_info = info if isinstance(info, dict) else {}
        version = params.get("protocolVersion")
        session.protocol_version = version if isinstance(version, str) else None
        started = time.monotonic()
        try:
            worker = await self.supervisor.spawn(session.id)
        except SpawnError as exc:
            self.sessions.forget(session.id)
            log.warning("spawn failed session=%s: %s", session.id, exc)
            raise ServiceUnavailable(
                f"Could not start a browser worker: {exc}",
                data={"stderr": exc.stderr_tail},
                retry_after=SPAWN_RETRY_AFTER,
            ) from None
        session.connection = WorkerConnection(worker)
        session.state = State.LIVE
        log.info(
            "session opened session=%s port=%d pid=%d client=%s spawn_ms=%.0f",
            session.id,
            worker.port,
            worker.pid,
            session.client_info.get("name"),
            (time.monotonic() - started) * 1000,
        )
        if self.recorder is not None:
            self.recorder.session_opened(
                session.id,
                client_info=session.client_info,
                protocol_version=session.protocol_version,
                port=worker.port,
                pid=worker.pid,
            )
        return session

    async def end(self, session: Session, state: State) -> None:
        """Ends the session for good: the worker's MCP session, its process group, its files."""
        if session.state in ENDED:
            return
        session.state = state
        self.sessions.forget(session.id)
        connection, session.connection = session.connection, None
        if connection is not None:
            if state is State.CLOSED and session.worker_session_id is not None:
                await connection.delete_session(session.worker_session_id)
            await connection.aclose()
        if self.recorder is not None:
            self.recorder.session_state(session.id, state.value)
            # The worker's snapshot files are read by the recorder; let it finish before they go.
            await self.recorder.flush()
        await self.supervisor.stop(session.id)
        await self.supervisor.forget(session.id)
        log.info("session ended session=%s reason=%s", session.id, state.value)

    def _worker_exited(self, worker: Worker, returncode: int) -> None:
        session = self.sessions.get(worker.session_id)
        if session is None or session.state in ENDED or worker.stopping:
            return
        log.warning(
            "worker exited session=%s pid=%d code=%s stderr=%r",
            worker.session_id,
            worker.pid,
            returncode,
            worker.stderr_tail()[-500:],
        )
        if self._tg is not None:
            self._tg.start_soon(self.end, session, State.ERROR)

    async def _reap_idle(self) -> None:
        tick = min(REAP_TICK_MAX, max(self.idle_timeout / 4, 0.05))
        while True:
            await anyio.sleep(tick)
            now = time.monotonic()
            for session in self.sessions.live():
                if session.state is State.LIVE and session.idle_for(now) >= self.idle_timeout:
                    log.info("reaping idle session=%s idle_s=%.1f", session.id, session.idle_for(now))
                    await self.end(session, State.REAPED)
