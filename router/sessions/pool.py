"""Warm workers: spawned ahead of demand so that opening a conversation costs one forwarded
``initialize``, not a spawn, and its first tool call not a browser launch (``--warm-workers``).

Each pooled worker gets a session id minted in advance (its port is still the hash of its id),
is spawned through the admission (it holds a slot under ``max_live_workers``, only ever a free
one), and gets a router-owned *control* MCP session that launches its browser (``browser_tabs list``: the
persistent context's first tab, ``about:blank``). Workers run with ``--user-data-dir
--shared-browser-context``, so the client's MCP session later joins that same browser.

The control session is never closed: @playwright/mcp closes the shared browser when the last MCP
session that used it ends, and verified here, a control session closed before the client's
first tool call took the browser with it (the client paid ~0.8 s for a new one). It lives as
long as the worker, which every path that detaches a session's worker ends anyway.

``initialize`` without a session id takes a ready worker (``take``); the pool refills in the
background, one worker at a time, only into free slots. When a session needs a slot, a pooled
worker is ended before any live session is hibernated (``evict_one``). A pooled worker that dies
is dropped and replaced, never handed out. Pooled workers have no Session: they are never reaped
or health-checked as sessions, and shutdown ends them and deletes their directories.

A worker that waits goes cold (node's code for a navigation): a first call after 5 min cost
1.47-1.56x a steady one, ~0.9x just after the warm-up (scripts/bench --only aged). So a waiting
worker gets a snapshot of its blank tab every ``keep_warm_every`` seconds (``keep_warm``; 30 by
default): 0.94-0.95x, for up to ~1.7 ms of CPU a second per waiting worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

from router.errors import RouterError
from router.sessions.admission import Admission
from router.sessions.bringup import BringUps, default_bring_ups
from router.sessions.client_preparer import ClientPreparer
from router.sessions.control import ControlError, ControlSession
from router.sessions.pooled import POKE_ARGS, POKE_TOOL, WARM_ARGS, WARM_TOOL, Pooled
from router.sessions.roots import Roots
from router.sessions.table import mint_session_id
from router.sessions.warm_up import warm_browser
from router.upstream.connection import WorkerConnection
from workers._exceptions import WorkerError
from workers.supervisor import Supervisor, Worker

log = logging.getLogger("mcp_router.pool")

POLL: Final = 1.0  # re-check for free slots this often even when nothing signalled a change
# The warm-up's own http page: the worker's port answers (403: not the worker's secret host name).
WARM_URL: Final = "http://localhost:{port}/"
# Waiting workers are poked this often by default (--keep-warm-interval): node kept a
# navigation's code ready 20-25 s after a call, not 55 s (@playwright/mcp 0.0.83, 2 cores).
KEEP_WARM_EVERY: Final = 30.0
# @playwright/mcp closes an idle browser after an hour without a completed tool call (headless
# default); a pooled worker is poked well before that even with keep-warm off, which also checks
# it still answers.
KEEP_ALIVE_EVERY: Final = 20 * 60.0
FAILURE_BACKOFF: Final = (1.0, 2.0, 5.0, 10.0, 30.0)
CLOSE_WAIT: Final = 10.0
# After a take, the refill waits this long: spawning node and launching Chromium would otherwise
# compete for the CPU with the new conversation's first calls (measured here on 2 cores: its
# first browser_navigate took ~430 ms instead of ~200 ms). The next take has the rest of the pool.
REFILL_DELAY: Final = 3.0


class WarmPool:
    def __init__(
        self,
        *,
        admission: Admission,
        supervisor: Supervisor,
        size: int,
        start_soon: Callable[[Callable[[], Awaitable[Any]]], None],
        extra_demand: Callable[[], int] = lambda: 0,
        bring_ups: BringUps | None = None,
        spare_memory: Callable[[], bool] = lambda: True,
        memory_short: Callable[[], bool] = lambda: False,
        keep_warm_every: float = KEEP_WARM_EVERY,
    ) -> None:
        """``size`` workers always (``--warm-workers``); ``extra_demand()`` more while it asks
        for them (the resume reserve: a dormant session will want one soon). Each fill waits
        its turn in ``bring_ups`` with the sessions' own spawns: a refill never makes a burst
        of resumes run more bring-ups at once than there are cores. Past ``size``, a fill also
        needs ``spare_memory()`` (the reserve's first worker too: memory spent on a guess is
        never taken from a machine short of it); while ``memory_short()``, it shrinks to ``size``.
        A ready worker is poked every ``keep_warm_every`` seconds (0: only every 20 min, which
        keeps its browser open)."""
        self.admission = admission
        self.bring_ups = bring_ups or BringUps(default_bring_ups())
        self.supervisor = supervisor
        self.start_soon = start_soon
        self.size = max(0, size)
        self.extra_demand = extra_demand
        self.spare_memory = spare_memory
        self.memory_short = memory_short
        self.poke_every = min(keep_warm_every, KEEP_ALIVE_EVERY) if keep_warm_every > 0 else KEEP_ALIVE_EVERY
        self.pokes = 0  # keep-warm calls answered, since start (a counter in /metrics)
        self._entries: dict[str, Pooled] = {}  # filling and ready, in the order they were started
        self._changed = anyio.Event()
        self._became_ready = anyio.Event()  # set (and replaced) each time a worker is ready
        self._yielding = 0  # evictions in progress: a slot is on its way to a session, not to us
        self._failures = 0
        self._retry_at = 0.0
        self._stopping = False
        self.clients = ClientPreparer(start_soon=start_soon)  # each ready worker's prepared session

    def expect(self, initialize_params: dict[str, Any]) -> None:
        """The shape of the next client's ``initialize`` (the last one seen): ready workers get
        an MCP session opened with it ahead of time, so the first call does not pay for one."""
        self.clients.expect(initialize_params)

    def expect_roots(self, roots: Roots) -> None:
        """The roots of the next client that declares ``roots`` (the last ones seen): ready
        workers' prepared sessions make their first call with them (prepared_stream.py)."""
        if self.clients.expect_roots(roots):
            self._signal()

    # -- queries ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Ready workers."""
        return sum(1 for e in self._entries.values() if e.ready)

    def owns(self, session_id: str) -> bool:
        return session_id in self._entries

    def ready_ids(self) -> list[str]:
        """Ids of the ready workers, the next one to be taken first."""
        return [e.id for e in self._entries.values() if e.ready]

    def reserve_ready(self) -> int:
        """Ready workers held for resumes: those past ``size`` (any ready worker serves either)."""
        return max(0, len(self) - self.size)

    def wake(self) -> None:
        """The demand may have changed (a session went to sleep): look again now, not at the
        next poll; a click right after a reap then finds the reserve filling, not absent."""
        self._signal()

    def prepared_sessions(self, initialize_params: dict[str, Any]) -> list[str]:
        """Worker-side ids of the ready workers' prepared sessions opened with these params."""
        return [
            e.client.session_id
            for e in list(self._entries.values())  # read from other threads by tests
            if e.ready and e.client is not None and e.client.session_id and e.client.opened_with == initialize_params
        ]

    def warmed_sessions(self) -> list[str]:
        """Worker-side ids of the ready workers' prepared sessions that made their first call
        with a client's roots, their GET stream still held."""
        return [
            e.client.session_id
            for e in list(self._entries.values())  # read from other threads by tests
            if e.ready and e.client is not None and e.client.session_id and e.stream is not None and e.stream.alive
        ]

    # -- handing out -----------------------------------------------------------------------------

    def take(self) -> Pooled | None:
        """A ready, live worker for a new session, or None (the caller spawns one cold).

        Synchronous: the entry leaves the pool before anyone else can look. Its slot under
        ``max_live_workers`` is held under its id, which becomes the session's id.
        """
        # One being poked only when no other is ready: its snapshot is read only, but it is work.
        for entry in sorted((e for e in self._entries.values() if e.ready), key=lambda e: e.poking):
            del self._entries[entry.id]
            self._signal()
            worker = entry.worker
            if worker is not None and worker.alive() and not worker.stopping:
                self._retry_at = max(self._retry_at, time.monotonic() + REFILL_DELAY)
                log.info("warm worker taken session=%s port=%d pid=%d", entry.id, worker.port, worker.pid)
                return entry
            log.warning("warm worker found dead, replacing it id=%s", entry.id)
            self._start_soon_discard(entry)
        return None

    async def take_soon(self, wait: float) -> Pooled | None:
        """A ready worker, or the one being filled once it is ready (within ``wait``): a worker
        whose node is up and whose browser is launching is nearer than a new spawn (one still
        queued for a bring-up slot is not)."""
        entry = self.take()
        if entry is not None:
            return entry
        filling = [e for e in self._entries.values() if e.started and not e.ready]
        if not filling:
            return None
        with anyio.move_on_after(wait):
            await filling[0].done.wait()
        return self.take()

    async def next_ready(self) -> Pooled:
        """The next worker to be ready, taken (cancellable: it takes only after its last await)."""
        while True:
            entry = self.take()
            if entry is not None:
                return entry
            await self._became_ready.wait()

    def give_back(self, entry: Pooled) -> None:
        """A taken worker nobody used after all (its taker was cancelled): ready again."""
        if entry.worker is not None and entry.worker.alive() and not self._stopping:
            self._entries[entry.id] = entry
            self._ready_now()
        else:
            self._start_soon_discard(entry)

    # -- making room -----------------------------------------------------------------------------

    async def evict_one(self, for_id: str = "") -> bool:
        """End one pooled worker (ready first, else one being filled) to free its slot for a
        session. True once its slot is free: the caller takes it before the pool can refill."""
        entries = list(self._entries.values())
        if not entries:
            return False
        entry = next((e for e in reversed(entries) if e.ready), entries[-1])
        self._yielding += 1
        try:
            log.info("ending warm worker id=%s to make room", entry.id)
            if entry.ready:
                self._entries.pop(entry.id, None)
                await self._discard(entry)
            else:
                entry.scope.cancel()
                await entry.done.wait()
        finally:
            self._yielding -= 1
        return True

    # -- life cycle ------------------------------------------------------------------------------

    async def refill(self) -> None:
        """The refill task (in the manager's task group): one worker at a time, into free slots.
        Also watches pooled workers' exits while it runs."""
        supervisor = self.supervisor
        supervisor.add_exit_listener(self._worker_exited)
        try:
            while True:
                if self._should_fill():
                    entry = Pooled(mint_session_id())
                    self._entries[entry.id] = entry
                    await self._fill(entry)
                    continue
                await self.keep_warm()
                await self._trim()
                await self.clients.refresh(
                    [e for e in self._entries.values() if e.ready], lambda e: self._entries.get(e.id) is e
                )
                with anyio.move_on_after(POLL):
                    await self._changed.wait()
                self._changed = anyio.Event()
        finally:
            supervisor.remove_exit_listener(self._worker_exited)

    def target(self) -> int:
        return self.size + max(0, self.extra_demand())

    async def _trim(self) -> None:
        """Ends a ready worker nobody is expected to want any more (the reserve's demand went),
        or one of the reserve's once memory is short."""
        ready = [e for e in self._entries.values() if e.ready]
        if not ready:
            return
        unwanted = len(self._entries) > self.target()
        if unwanted or (len(self._entries) > self.size and self.memory_short()):
            entry = ready[-1]
            self._entries.pop(entry.id, None)
            why = "no longer wanted" if unwanted else "memory is short"
            log.info("ending a warm worker (%s) id=%s", why, entry.id)
            await self._discard(entry)

    async def close(self) -> None:
        """Shutdown: every pooled worker ended and its files deleted; nothing is left behind."""
        self._stopping = True
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT):
            async with anyio.create_task_group() as tg:
                for entry in list(self._entries.values()):
                    if entry.ready:
                        self._entries.pop(entry.id, None)
                        tg.start_soon(self._discard, entry)
                    else:
                        entry.scope.cancel()
                        tg.start_soon(entry.done.wait)

    # -- filling ---------------------------------------------------------------------------------

    def _should_fill(self) -> bool:
        return (
            not self._stopping
            and len(self._entries) < self.target()
            and (len(self._entries) < self.size or self.spare_memory())
            and not self._yielding
            and self.admission.has_room()
            and time.monotonic() >= self._retry_at
        )

    async def _fill(self, entry: Pooled) -> None:
        started = time.monotonic()
        try:
            with entry.scope:
                # Only a free slot: a pooled worker never makes a session sleep.
                if not self.admission.try_admit(entry.id):
                    return
                async with self.bring_ups.slot(urgent=False):
                    entry.started = True
                    started = time.monotonic()
                    entry.worker = await self.admission.spawn(entry.id, admitted=True)
                    entry.connection = WorkerConnection(entry.worker)
                    entry.control = ControlSession(entry.connection)
                    await entry.control.open()
                    entry.browser = WARM_TOOL in await entry.control.tool_names()  # a stand-in has none
                    if entry.browser:
                        await entry.control.call(WARM_TOOL, WARM_ARGS)
                # Out of the bring-up slot: the browser is up, and a client's spawn may need it.
                if entry.browser:
                    await warm_browser(entry.control, WARM_URL.format(port=entry.worker.port))
                entry.warmed_at = time.monotonic()
                entry.client, entry.stream = await self.clients.open_client(entry)
                if entry.worker.alive() and self._entries.get(entry.id) is entry:
                    entry.ready = True
        except Exception as exc:  # the pool is an optimisation: it must never take the router down
            self._failures += 1
            delay = FAILURE_BACKOFF[min(self._failures, len(FAILURE_BACKOFF)) - 1]
            self._retry_at = time.monotonic() + delay
            expected = isinstance(exc, RouterError | ControlError | WorkerError)
            log.warning(
                "warm worker failed id=%s (retrying in %.0f s): %s", entry.id, delay, exc, exc_info=not expected
            )
        finally:
            if not entry.ready:
                self._entries.pop(entry.id, None)
                with anyio.CancelScope(shield=True):
                    await self._discard(entry)
            entry.done.set()
        if entry.ready:
            self._ready_now()
            self._failures = 0
            worker = entry.worker
            assert worker is not None
            log.info(
                "warm worker ready id=%s port=%d pid=%d ms=%.0f pool=%d/%d",
                entry.id, worker.port, worker.pid, (time.monotonic() - started) * 1000, len(self), self.target(),
            )  # fmt: skip

    async def keep_warm(self) -> None:
        """Pokes each ready worker that waited ``poke_every`` since its last call (one at a time:
        a worker that stopped answering is ended and replaced)."""
        now = time.monotonic()
        for entry in [e for e in self._entries.values() if e.ready and now - e.warmed_at >= self.poke_every]:
            control = entry.control
            if self._entries.get(entry.id) is not entry or control is None:
                continue  # taken meanwhile
            entry.poking = True
            try:
                if entry.browser:
                    await control.call(POKE_TOOL, POKE_ARGS)
                    self.pokes += 1
                entry.warmed_at = time.monotonic()
            except ControlError as exc:
                if self._entries.pop(entry.id, None) is entry:
                    log.warning("warm worker stopped answering id=%s: %s", entry.id, exc)
                    await self._discard(entry)
            finally:
                entry.poking = False

    # -- ending ----------------------------------------------------------------------------------

    def _worker_exited(self, worker: Worker, returncode: int) -> None:
        entry = self._entries.get(worker.session_id)
        if entry is None or entry.worker is not worker or worker.stopping:
            return
        log.warning("warm worker exited id=%s pid=%d code=%s; replacing it", entry.id, worker.pid, returncode)
        if entry.ready:
            del self._entries[entry.id]
            self._start_soon_discard(entry)
        else:
            entry.scope.cancel()  # its filling fails and cleans up

    def _start_soon_discard(self, entry: Pooled) -> None:
        self.admission.release(entry.id)  # at once: the slot must not leak if the job never runs
        self.start_soon(lambda: self._discard(entry))

    async def _discard(self, entry: Pooled) -> None:
        """Ends the worker, deletes its directory, frees its slot (last, with no await after it,
        so an evicting caller takes the slot before the refill task can run)."""
        with anyio.CancelScope(shield=True):
            if entry.stream is not None:
                await entry.stream.close()
            if entry.connection is not None:
                await entry.connection.aclose()
            await self.supervisor.forget(entry.id)
        self.admission.release(entry.id)
        self._signal()

    def _signal(self) -> None:
        self._changed.set()

    def _ready_now(self) -> None:
        self._became_ready.set()
        self._became_ready = anyio.Event()
