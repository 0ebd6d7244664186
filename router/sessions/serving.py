"""A client request's side of a session: a worker for it (a warm one, or a resume queued with
the other bring-ups), the answers the router gives while there is none (``ping``, a cached
``tools/list``), a worker that died or forgot the session replaced, and the browser state's
save scheduled after a call that may have changed it."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio

from router.errors import SessionNotFound, WorkerUnreachable
from router.protocol.messages import ClientMessage
from router.sessions import statefiles
from router.sessions.bringup import BringUps
from router.sessions.continuity import Continuity
from router.sessions.handshake import HandshakeCache
from router.sessions.page_crash import end_for_lost_page
from router.sessions.pool import WarmPool
from router.sessions.resume_notice import RESUME_REASONS
from router.sessions.table import ENDED, Session, State
from router.sessions.upkeep import Upkeep
from router.sessions.worker_session import reopen
from router.upstream.connection import WorkerConnection

if TYPE_CHECKING:
    from router.sessions.browser_watch import BrowserWatches

log = logging.getLogger("mcp_router.continuity")

WARM_WAIT: Final = 10.0  # no longer than a cold spawn and browser launch under load take
# A new worker's first request waits this long at most for the client's GET stream to be joined
# to the worker's: servers ask roots/list there at once (Playwright itself waits up to 5 s for it).
RELAY_WAIT: Final = 2.0


class RequestServing:
    def __init__(
        self, *, continuity: Continuity, pool: WarmPool, upkeep: Upkeep, handshakes: HandshakeCache,
        bring_ups: BringUps, browsers: BrowserWatches | None = None,
    ) -> None:  # fmt: skip
        self.continuity = continuity
        self.browsers = browsers
        self.pool = pool
        self.upkeep = upkeep
        self.handshakes = handshakes
        self.bring_ups = bring_ups

    def cached_answer(self, session: Session, message: ClientMessage) -> dict[str, Any] | None:
        """The result of a request the router answers itself while the session has no worker
        (``ping``, and ``tools/list`` from the handshake cache); None when a worker must answer."""
        if message.method == "ping":
            return {}
        if message.method != "tools/list" or message.params.get("cursor") is not None:
            return None
        if session.connection is not None:
            return None  # a live worker answers for itself, in its current state
        entry = self.handshakes.get(session.protocol_version or "")
        return None if entry is None else dict(entry["tools"])

    @asynccontextmanager
    async def serving(self, session: Session, message: ClientMessage) -> AsyncIterator[bool]:
        """A client request (counted in flight by the endpoint): given a worker (resuming if
        needed), and, when it was a browser tool call, followed by a debounced save of the browser
        state. Yields whether a worker had to be started for it."""
        url_before = session.current_url
        try:
            started = await self.ensure_worker(session)
            if not started and session.roots.worker_behind and session.stream.held and session.in_flight == 1:
                await self.renew_for_roots(session)
            if session.stream.held and not session.relay_ready.is_set():  # else no wait, at no cost
                await self._relay_joined(session)
            yield started
        finally:  # a call that failed after its tool ran may have changed the browser too
            self.served(session, message, url_before)

    def served(self, session: Session, message: ClientMessage, url_before: str | None) -> None:
        """A request's end: a browser tool call (which may have changed the browser, even one that
        failed after its tool ran) has the browser state saved, debounced."""
        tool = message.tool_name or ""
        if tool.startswith("browser_") and session.connection is not None:
            if not session.browser_used:  # on disk too: a later run never ends it to make room
                session.browser_used = True
                statefiles.keep_session(self.continuity.layout.session_dir(session.id), session)
            # A snapshot changes no cookie and no tab, unless the page moved meanwhile (a
            # login's redirect landing during browser_wait_for sets the session cookie).
            if not self.handshakes.read_only(tool) or session.current_url != url_before:
                self.upkeep.schedule_save(session)

    async def _relay_joined(self, session: Session) -> None:
        """Waits (RELAY_WAIT at most) until the client's GET stream, if it has one, relays the
        worker session's: the worker asks its roots there. A worker session that stream found
        gone (the worker ended it, as after a ping unanswered while the stream was away) is
        reopened at once, the request sent on the new one, rather than waited for in vain."""
        with anyio.move_on_after(RELAY_WAIT):
            # Each switch of worker session replaces the events: the current ones are waited for.
            while session.stream.held and not (session.relay_ready.is_set() or session.knows_worker_session_lost):
                await _first_of(session.relay_ready, session.relay_lost, session.worker_changed)
        connection = session.connection
        if session.knows_worker_session_lost and connection is not None:
            await self.reopen_worker_session(session, connection, lost=session.lost_worker_session)

    async def ensure_worker(self, session: Session) -> bool:
        """True when a worker was started (spawned or resumed) for the session just now."""
        connection = session.connection
        if connection is not None and session.page_lost_on is connection:
            # Its page crashed and the watch has not ended it yet: this call waits for the
            # resume rather than meet the blank tab.
            await end_for_lost_page(self.continuity, session)
        elif connection is not None:
            if connection.worker.alive():
                return False
            # Died a moment ago: the supervisor's exit listener runs only after its sweep.
            self.continuity.crashed(session)
        async with session.lock:
            if session.state in ENDED:
                raise SessionNotFound("Session not found: initialize a new session")
            if session.connection is None:
                previous = session.state
                if previous in (State.CRASHED, State.DEGRADED):
                    await self.upkeep.restart_allowed(session)
                reason = RESUME_REASONS.get(previous)
                # A warm worker, if one is ready or nearly: its node is up, its browser launched.
                warm = await self.pool.take_soon(WARM_WAIT)
                if warm is None:
                    # Queued with the other bring-ups; a warm worker ready first is taken instead.
                    queued = time.monotonic()
                    async with self.bring_ups.slot_or(self.pool.next_ready, self.pool.give_back) as warm:
                        if warm is None:
                            await self.continuity.attach(session, reason=reason, queued_since=queued)
                if warm is not None:
                    await self.continuity.attach(
                        session, worker=warm.worker, control=warm.control, connection=warm.connection,
                        prepared=warm.client, prepared_stream=warm.stream, reason=reason,
                    )  # fmt: skip
                if session.roots.known is not None:  # the next warm worker's session is warmed with them
                    self.pool.expect_roots(session.roots.known)
                if self.browsers is not None:  # from the restore on, not from this call's end
                    self.browsers.watch(session)
                return True
        return False

    async def renew_for_roots(self, session: Session) -> None:
        """The client's roots changed since its worker session was opened: @playwright/mcp took
        them at that session's first call and ignores list_changed, so a new session on the same
        worker takes them (it asks the client on its stream; the page stays, the context being
        shared). The old one is left to the worker, not ended: a DELETE of it makes Playwright
        close the browser, page and all. Only with the client's stream there to answer, and no
        other request of the client's on the old session."""
        connection, old = session.connection, session.worker_session_id
        if connection is None or old is None or self.continuity.shares(connection.worker):
            return  # on a host a new session is a new, empty context: the old roots stay
        if await self.reopen_worker_session(session, connection) and session.worker_session_id != old:
            log.info("worker session renewed for the client's new roots session=%s", session.id)

    async def replace_dead_worker(self, session: Session, connection: WorkerConnection) -> WorkerConnection:
        """The worker died under a request (refused it, or broke and exited): treat it as crashed
        (restart budget) and resume."""
        if session.connection is connection:
            # Said here: ended below as a stopped worker, its exit does not log itself as a crash.
            worker = connection.worker
            log.warning("worker %s died under a request (%s), resuming", worker.session_id, worker.returncode)
            self.continuity.crashed(session)
            # Its exit fully handled before a respawn.
            await self.continuity.end_worker(session, worker)
        return await self._resumed(session)

    async def replace_lost_page(self, session: Session, connection: WorkerConnection) -> WorkerConnection:
        """A request met its session's page crashed under a live worker (``page_crash.py``): that
        worker is ended, its state saved with the page put back, and the session resumed."""
        if session.connection is connection:
            session.page_lost_on = connection
        return await self._resumed(session)

    async def _resumed(self, session: Session) -> WorkerConnection:
        await self.ensure_worker(session)
        if session.connection is None:
            raise WorkerUnreachable("Worker not available for this session")
        return session.connection

    async def reopen_worker_session(
        self, session: Session, connection: WorkerConnection, *, lost: str | None = None
    ) -> bool:
        """The worker forgot the client's session (404): replay the handshake on the same worker,
        unless another request has done so since this one was sent (it is then resent on that
        session): requests that got the same 404 must not each open one, or the client's stream
        follows one while the worker asks its roots on another. ``lost``: the worker session the
        request got its 404 from (default: the session's current one)."""
        lost = lost or session.worker_session_id
        async with session.lock:
            if session.connection is not connection:
                return session.connection is not None
            if session.worker_session_id == lost and not await reopen(self.continuity, session, connection):
                return False
        if session.stream.held:
            with anyio.move_on_after(RELAY_WAIT):
                await session.relay_ready.wait()
        return True


async def _first_of(*events: anyio.Event) -> None:
    """Returns once any of ``events`` is set."""
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)
