"""How many workers come up at once: a spawn, its browser's launch and a restore cost ~1.5-2.5
CPU-seconds each (node ~0.5, Chromium's launch ~0.9, the page's load ~0.5), so on a small
machine ten at once all crawl together. ``BringUps`` is the one queue for every bring-up, the
warm pool's refills included: at most ``limit`` run at once (one per core by default), the rest
wait in arrival order, a client's bring-up ahead of any refill.

A resume waiting in that queue takes a warm worker instead as soon as one is ready (``slot_or``):
a worker whose node is up and whose browser is launched is nearer than a slot.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final, TypeVar

import anyio

from workers.memory import host_memory

T = TypeVar("T")


# A warm worker (node + Chromium on about:blank) holds ~0.3-0.5 GiB; a browsing one ~0.5 GiB.
WARM_WORKER_BYTES: Final = 600 * 1024 * 1024
# A growing resume reserve leaves at least this much to everything else on the machine.
RESERVE_FREE_FLOOR: Final = 2 * 1024 * 1024 * 1024


def available_memory() -> int | None:
    """Bytes that could be handed out without swapping or hitting the container's or unit's
    memory limit; None where unknown."""
    return host_memory().available()


def room_for_another_warm_worker(available: Callable[[], int | None] = available_memory) -> bool:
    """Whether one more warm worker still leaves the floor free (True where memory is unknown)."""
    free = available()
    return free is None or free >= RESERVE_FREE_FLOOR + WARM_WORKER_BYTES


def memory_below_floor(available: Callable[[], int | None] = available_memory) -> bool:
    """Whether what is free has fallen under the floor (browsing sessions grew, or something else
    on the machine did): the reserve then gives workers back. A worker's size below the level a
    fill needs, so a trim is never followed by a refill of the same worker."""
    free = available()
    return free is not None and free < RESERVE_FREE_FLOOR


def default_bring_ups() -> int:
    """One bring-up per core: each keeps about one core busy while it runs."""
    return max(1, os.cpu_count() or 1)


class BringUps:
    """At most ``limit`` bring-ups at once. Waiters are served in arrival order within their
    class, and a client's (a new conversation, a resume) before the warm pool's refill: a refill
    is for a conversation that may come, a waiting client is one that came."""

    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._running = 0
        self._waiting: dict[bool, deque[anyio.Event]] = {True: deque(), False: deque()}

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return len(self._waiting[True]) + len(self._waiting[False])

    async def _acquire(self, urgent: bool) -> None:
        # A free slot means nobody waits: a released slot passes straight to the next waiter.
        if self._running < self._limit:
            self._running += 1
            return
        granted = anyio.Event()
        self._waiting[urgent].append(granted)
        try:
            await granted.wait()
        except BaseException:
            if granted.is_set():  # the slot was handed over as the wait was cancelled: pass it on
                self._release()
            else:
                self._waiting[urgent].remove(granted)
            raise

    def _release(self) -> None:
        for urgent in (True, False):
            if self._waiting[urgent]:
                self._waiting[urgent].popleft().set()  # the slot passes on: running stays
                return
        self._running -= 1

    @asynccontextmanager
    async def slot(self, *, urgent: bool = True) -> AsyncIterator[None]:
        """Held for the whole bring-up: spawn, browser launch, restore. ``urgent=False``: the
        pool's refill, served after every client waiting."""
        await self._acquire(urgent)
        try:
            yield
        finally:
            self._release()

    @asynccontextmanager
    async def slot_or(
        self, ready: Callable[[], Awaitable[T]], give_back: Callable[[T], None]
    ) -> AsyncIterator[T | None]:
        """Whichever comes first: ``ready()``'s result (no slot held; the caller uses what it
        got) or a free slot (yields None; the slot is held for the body). ``ready`` must be
        cancellable without losing what it takes (it takes synchronously, after its last await);
        what it took is handed to ``give_back`` when the wait itself is cancelled."""
        got: list[T] = []
        slot = False

        async def wait_slot(scope: anyio.CancelScope) -> None:
            nonlocal slot
            await self._acquire(True)
            slot = True
            scope.cancel()

        async def wait_ready(scope: anyio.CancelScope) -> None:
            got.append(await ready())
            scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_slot, tg.cancel_scope)
                tg.start_soon(wait_ready, tg.cancel_scope)
        except BaseException:
            if slot:
                self._release()
            if got:
                give_back(got[0])
            raise
        if got:  # both may finish in one turn of the loop: the warm worker wins, the slot goes back
            if slot:
                self._release()
            yield got[0]
            return
        try:
            yield None
        finally:
            self._release()
