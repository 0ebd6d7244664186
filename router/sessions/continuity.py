"""A session outlives its workers: taking a new worker up, saving its browser, letting it go.

``attach`` gives a session a worker (a warm one or a new spawn): it replays the client's recorded
``initialize`` so the client's own traffic has a session on the worker, and opens the router's
*control* session beside it (no capabilities: the worker never asks it for ``roots/list``). When
the session had browsed, the control session restores the saved cookies, storage and tabs, and
re-takes the current tab's snapshot so that the element refs the model holds resolve again
(Playwright numbers refs in document order: the same page gets the same refs).

``go_dormant`` (reap, hibernation, shutdown) saves the browser state through the control session
and ends the worker; ``crashed`` notes a worker that died. The session id stays valid throughout.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import anyio

from router.errors import WorkerUnreachable
from router.layout import StateLayout, own_folder
from router.sessions import statefiles
from router.sessions.admission import Admission
from router.sessions.bringup import BringUps
from router.sessions.control import ControlError, ControlSession
from router.sessions.conversations import ConversationStore
from router.sessions.handshake import HandshakeCache, learn
from router.sessions.hosts import Hosts
from router.sessions.opened import record_opened
from router.sessions.prepared_stream import HandOver, PreparedStream, hand_over, hold_for_streamless
from router.sessions.restore import RestoreProgress, restore_browser
from router.sessions.resume_notice import CONVERSATION_REASON, partial_notice, resumed_notice
from router.sessions.state_save import BrowserStateSaver
from router.sessions.table import ENDED, RECORD_STATE, Session, State
from router.upstream.connection import WorkerConnection
from workers.supervisor import Supervisor, Worker

if TYPE_CHECKING:
    from router.operator.metrics import Metrics
    from router.record.recorder import Recorder

log = logging.getLogger("mcp_router.continuity")

# The client's answer to the roots/list the router asks when its GET stream opens (roots.py),
# awaited at most this long before a warm worker's prepared session is given up.
ROOTS_WAIT: Final = 1.0
# A restore holds a bring-up slot (``warm_restores``, or the caller's for a spawn): one stuck on
# pages that never load is given up after this, the session carrying on with what it got, so
# the queue behind it moves on. One takes ~0.5-2 s; each of its control calls is bounded at 30 s.
RESTORE_BUDGET: Final = 30.0
# A host's handshake broke: it died if it exits within this (a killed node resets its sockets first).
HOST_DEATH_WAIT: Final = 1.0


class Continuity:
    def __init__(
        self,
        *,
        supervisor: Supervisor,
        admission: Admission,
        handshakes: HandshakeCache,
        layout: StateLayout,
        recorder: Recorder | None,
        metrics: Metrics | None,
        start_soon: Callable[[Callable[[], Awaitable[Any]]], None],
        bring_ups: BringUps,
        on_dormant: Callable[[], None] = lambda: None,
        conversations: ConversationStore | None = None,
        hosts: Hosts | None = None,
    ) -> None:
        """``on_dormant``: called once a session's worker has ended (the resume reserve's demand
        changed: its warm worker starts now, not at the pool's next poll). ``hosts``: sessions
        share workers (``--sessions-per-browser``): a session takes a place on a host, not a
        worker of its own, and leaves it when it sleeps or ends."""
        self.supervisor = supervisor
        self.on_dormant = on_dormant
        self.bring_ups = bring_ups
        # Restores onto warm workers queue among themselves (not behind cold spawns): ten at once
        # otherwise all crawl to the end together (--resume-reserve 10: p50 1.62-1.72 s, queued 1.32-1.40 s).
        self.warm_restores = BringUps(bring_ups.limit)
        self.admission = admission
        self.handshakes = handshakes
        self.layout = layout
        self.recorder = recorder
        self.metrics = metrics
        self.start_soon = start_soon
        self.conversations = conversations
        self.hosts = hosts
        self.state_saver = BrowserStateSaver(layout, conversations)
        self.roots_wait = ROOTS_WAIT  # ``attach``'s default

    # -- taking a worker up ----------------------------------------------------------------------

    async def attach(
        self,
        session: Session,
        *,
        worker: Worker | None = None,
        control: ControlSession | None = None,
        connection: WorkerConnection | None = None,
        prepared: ControlSession | None = None,
        prepared_stream: PreparedStream | None = None,
        reason: str | None = None,
        queued_since: float | None = None,
        roots_wait: float | None = None,
    ) -> dict[str, Any]:
        """A worker for ``session`` (``worker`` when one was taken from the pool, else a spawn):
        the client's handshake replayed, the control session opened, the browser restored.
        ``prepared``: a session the pool opened on ``worker`` ahead of time, and
        ``prepared_stream`` its GET stream: the client's or not as ``hand_over`` decides (roots
        awaited ``roots_wait`` s, by default ``self.roots_wait``; 0 at ``initialize``); if not,
        the handshake is replayed. A client that declares roots and has no GET stream gets one
        held by the router (``hold_for_streamless``).
        Called with ``session.lock`` held; raises ServiceUnavailable or WorkerUnreachable.
        Returns the worker's answer to the replayed ``initialize``.

        A spawn and its browser's launch and restore wait for a slot in ``bring_ups`` (unless
        ``queued_since``: the caller holds one, queued for it since then, monotonic): ten
        sessions resuming at once on two cores otherwise all crawl together (measured here:
        each waited ~18 s), where queued, the first are back at once and the median halves."""
        if worker is not None:
            taken = HandOver(None, None, False)
            if prepared is not None:
                wait = self.roots_wait if roots_wait is None else roots_wait
                try:
                    taken = await hand_over(
                        session, prepared, prepared_stream, wait=wait, resuming=reason is not None,
                        start_soon=self.start_soon,
                    )  # fmt: skip
                except BaseException:  # cancelled: the worker taken from the pool is nobody's
                    await self._let_go(session, worker, connection, prepared_stream)
                    raise
            return await self._attach(
                session, worker, control, connection, taken.prepared, reason, time.monotonic(), taken.held,
                taken.waited,
            )  # fmt: skip
        if queued_since is not None:
            return await self._attach(session, None, control, connection, None, reason, queued_since)
        queued = time.monotonic()
        async with self.bring_ups.slot():
            return await self._attach(session, None, control, connection, None, reason, queued)

    async def _attach(
        self,
        session: Session,
        worker: Worker | None,
        control: ControlSession | None,
        connection: WorkerConnection | None,
        prepared: ControlSession | None,
        reason: str | None,
        queued: float,
        held: PreparedStream | None = None,
        stream_waited: bool = False,
    ) -> dict[str, Any]:
        started = time.monotonic()
        warm = worker is not None
        if reason is None and session.inherits_browser:
            reason = CONVERSATION_REASON
        if worker is None:
            worker = await (self.admission.spawn(session.id) if self.hosts is None else self.hosts.place(session.id))
        spawned = time.monotonic()
        connection = connection or WorkerConnection(worker)
        replay = prepared or ControlSession(connection)
        # On a host, the client's own MCP session is its browser context: the router's calls for
        # it (save, restore, picture) go there. Elsewhere a session of the router's own shares it.
        shared = self.shares(worker)
        control = control or (replay if shared else ControlSession(connection))
        worker_session_id = ""
        restored = cut_short = False
        failures: list[ControlError] = []
        handshake = restore_started = spawned
        progress = RestoreProgress()

        async def replay_handshake() -> None:
            nonlocal worker_session_id, handshake
            try:
                if replay.session_id is not None:  # prepared by the pool
                    worker_session_id = replay.session_id
                else:
                    worker_session_id = await replay.open(session.initialize_params or None)
            except ControlError as exc:
                failures.append(exc)
            handshake = time.monotonic()

        async def bring_back_the_browser() -> None:
            # Beside the handshake, not after it: the browser launch is most of a resume.
            nonlocal restored, cut_short, restore_started
            try:
                if control.session_id is None:
                    await control.open()
            except ControlError as exc:
                failures.append(exc)
                return
            restore_started = time.monotonic()
            if session.browser_used:
                try:
                    async with self.warm_restores.slot() if warm else contextlib.nullcontext():
                        with anyio.move_on_after(RESTORE_BUDGET) as budget:
                            restored = await restore_browser(
                                self.layout.session_dir(session.id), control, worker.output_dir,
                                fresh_profile=warm or shared, progress=progress,
                            )  # fmt: skip
                    if budget.cancelled_caught:
                        cut_short = True
                        log.warning("state restore given up after %.0f s session=%s", RESTORE_BUDGET, session.id)
                except ControlError as exc:  # a page without its cookies beats no page at all
                    cut_short = True
                    log.warning("state restore failed session=%s: %s", session.id, exc)

        # Until _bind the worker is the session's in no one's eyes but this call's: whatever ends
        # it early (a failure, a cancellation, the session ending meanwhile) must end the worker.
        try:
            if shared:  # one session: the handshake, then the restore's calls on it
                await replay_handshake()
                if not failures and session.browser_used and held is None:
                    held = await hold_for_streamless(
                        session, replay, waited=True, start_soon=self.start_soon, for_router_calls=True
                    )
                if not failures:
                    await bring_back_the_browser()
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(replay_handshake)
                    tg.start_soon(bring_back_the_browser)
            if failures:
                raise failures[0]
            version = (session.initialize_params or {}).get("protocolVersion")
            if isinstance(version, str) and self.handshakes.wants(version):  # no task when it need not learn
                self.start_soon(partial(learn, self.handshakes, version, replay.initialize_result, control))
            if session.state not in ENDED:
                session.worker_has_roots = held is not None
                if held is None:
                    held = await hold_for_streamless(
                        session, replay, waited=stream_waited, start_soon=self.start_soon
                    )
        except ControlError as exc:
            await self._let_go(session, worker, connection, held, replay.session_id)
            # A host that died as the session joined it (chosen before its exit was handled): another.
            hosts = self.hosts if shared and await worker.exits_within(HOST_DEATH_WAIT) else None
            if hosts is not None and hosts.dead(worker) is not None:
                return await self._attach(session, None, None, None, None, reason, queued)
            session.crashed()
            raise WorkerUnreachable(
                f"Could not start the session's browser worker: {exc}",
                data={"session": session.id, "stderr": worker.stderr_tail()},
            ) from None
        except BaseException:
            await self._let_go(session, worker, connection, held, replay.session_id)
            raise
        if session.state in ENDED:  # ended (DELETE, --end) while the worker was coming up
            await self._let_go(session, worker, connection, held, replay.session_id)
            return replay.initialize_result
        if held is not None:  # taken by the client's stream, which _bind wakes
            self.drop_held(session)
            session.adopted_stream = (connection, held)
        self._bind(session, connection, worker_session_id, control)
        session.inherits_browser = False
        session.unrestored = progress.left_out()  # laid under this worker's saves (unrestored.py)
        if restored:  # what is saved is what the browser now holds: the next save waits its interval
            session.state_saved_at = time.monotonic()
        if reason is not None:
            notice = resumed_notice(reason) if restored else partial_notice(reason) if cut_short else None
            session.resumed_notice = notice
            if self.metrics is not None:
                self.metrics.resumed()
            if self.recorder is not None:
                self.recorder.session_resumed(session.id, reason)
        done = time.monotonic()
        log.info(
            "worker attached session=%s reason=%s port=%d pid=%d restored=%s prepared=%s ms=%.0f queued_ms=%.0f "
            "spawn_ms=%.0f handshake_ms=%.0f restore_ms=%.0f",
            session.id, reason or "first-use", worker.port, worker.pid, restored, prepared is not None,
            (done - queued) * 1000,
            (started - queued) * 1000, (spawned - started) * 1000, (handshake - spawned) * 1000,
            (done - restore_started) * 1000,
        )  # fmt: skip
        return replay.initialize_result

    async def _let_go(
        self, session: Session, worker: Worker, connection: WorkerConnection | None, held: PreparedStream | None,
        worker_session: str | None = None,
    ) -> None:
        """Ends a worker brought up for ``session`` that the session does not get: its held
        stream and connection closed, its process ended (a warm one's directory with it), its
        slot freed last (nobody can take it while the process still runs); on a host, the
        session's MCP session there (``worker_session``) ended and its place given back.
        Shielded: it runs on a cancellation too."""
        with anyio.CancelScope(shield=True):
            if held is not None:
                await held.close()
            if connection is not None:
                if worker_session is not None and self.shares(worker):
                    await connection.delete_session(worker_session)
                await connection.aclose()
            await self.end_worker(session, worker)
        self.release_slot(worker)

    def drop_held(self, session: Session) -> None:
        """Closes a held stream of the session's worker nobody will relay any more."""
        stale = session.drop_adopted_stream()
        if stale is not None:
            self.start_soon(stale.close)

    def _bind(
        self, session: Session, connection: WorkerConnection, worker_session_id: str, control: ControlSession
    ) -> None:
        session.connection = connection
        session.worker_session_id = worker_session_id
        session.roots.worker_opened()
        session.control = control
        session.state = State.LIVE
        session.health_failures = 0
        session.page_lost_on = None  # a crash under the last worker was that worker's
        session.worker_switched()
        record_opened(self.recorder, session, connection.worker)

    # -- letting a worker go ---------------------------------------------------------------------

    def detach(self, session: Session, state: State) -> WorkerConnection | None:
        """Synchronous, so nobody can pick the same session between the check and the change."""
        connection, session.connection = session.connection, None
        if connection is not None:
            self.release_slot(connection.worker)  # a warm worker's slot is its own
            if self.hosts is not None:
                self.hosts.leave(session.id)
        session.worker_session_id = None
        session.control = None
        session.asked.clear()
        self.drop_held(session)
        session.state = state
        self.admission.release(session.id)
        self.record_state(session)
        session.worker_switched()
        return connection

    def shares(self, worker: Worker) -> bool:
        """Whether ``worker`` is a host several sessions share (hosts.py)."""
        return self.hosts is not None and self.hosts.shares(worker)

    def release_slot(self, worker: Worker) -> None:
        """Frees the worker slot a session's worker held; a host's stays with the host."""
        if not self.shares(worker):
            self.admission.release(worker.session_id)

    def record_state(self, session: Session) -> None:
        if self.recorder is not None:
            self.recorder.session_state(session.id, RECORD_STATE[session.state])

    def crashed(self, session: Session) -> None:
        connection = self.detach(session, State.CRASHED)
        session.crashed()
        if self.metrics is not None:
            self.metrics.crashed()
        if connection is not None:
            self.start_soon(connection.aclose)

    async def go_dormant(self, session: Session, state: State, *, force: bool = False) -> bool:
        """Reap or hibernate: save the browser state, end the worker, keep the id and profile."""
        if session.connection is None or (session.in_flight and not force):
            return False
        control, worker_session = session.control, session.worker_session_id
        connection = self.detach(session, state)
        assert connection is not None
        async with session.lock:
            await self.state_saver.save(session, connection, control)
            if worker_session is not None and self.shares(connection.worker):
                await connection.delete_session(worker_session)  # its context closes; the host lives on
            await connection.aclose()
            if self.recorder is not None:
                await self.recorder.flush()  # the recorder reads the output dir's files first
            await self.end_worker(session, connection.worker, clear_output=True)
            statefiles.keep_session(self.layout.session_dir(session.id), session)
        if self.metrics is not None:
            self.metrics.ended(state.value)
        log.info("session dormant session=%s reason=%s", session.id, state.value)
        self.on_dormant()
        return True

    async def end_worker(self, session: Session, worker: Worker, *, clear_output: bool = False) -> None:
        """Ends a worker the session no longer has. One taken from the warm pool lived under its
        own id: its directory goes with it (the session's saved state is under the session's).
        ``clear_output`` only with ``session.lock`` held: a new worker of the session runs in
        that same directory. A host is not ended: the session's place on it is given back."""
        if self.shares(worker):
            assert self.hosts is not None
            self.hosts.leave(session.id)
            # Its named files are its own: they go with it (the record has read them, flushed).
            folder = own_folder(worker.output_dir, session.id)
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(folder, ignore_errors=True))
            return
        await self.supervisor.stop(worker.session_id)
        if worker.session_id != session.id:
            if self.recorder is not None:
                # The record reads an answer's linked files (a navigation's snapshot, a
                # screenshot) as it writes the row, after the answer: before they go with the dir.
                await self.recorder.flush()
            await self.supervisor.forget(worker.session_id)
        elif clear_output:
            statefiles.clear_output(worker.output_dir)
