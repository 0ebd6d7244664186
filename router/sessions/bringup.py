"""How many workers come up at once: a spawn, its browser's launch and a restore cost ~1.5-2.5
CPU-seconds each (node ~0.5, Chromium's launch ~0.9, the page's load ~0.5), so on a small
machine ten at once all crawl together. ``BringUps`` is the one queue for every bring-up, the
warm pool's refills included: at most ``limit`` run at once (one per core by default), the rest
wait in arrival order.

A resume waiting in that queue takes a warm worker instead as soon as one is ready (``slot_or``):
a worker whose node is up and whose browser is launched is nearer than a slot.
"""

from __future__ import annotations

import os
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


def default_bring_ups() -> int:
    """One bring-up per core: each keeps about one core busy while it runs."""
    return max(1, os.cpu_count() or 1)


class BringUps:
    def __init__(self, limit: int) -> None:
        self._limiter = anyio.CapacityLimiter(max(1, limit))

    @property
    def limit(self) -> int:
        return int(self._limiter.total_tokens)

    @property
    def running(self) -> int:
        return int(self._limiter.borrowed_tokens)

    @property
    def waiting(self) -> int:
        return self._limiter.statistics().tasks_waiting

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Held for the whole bring-up: spawn, browser launch, restore."""
        token = object()
        await self._limiter.acquire_on_behalf_of(token)
        try:
            yield
        finally:
            self._limiter.release_on_behalf_of(token)

    @asynccontextmanager
    async def slot_or(
        self, ready: Callable[[], Awaitable[T]], give_back: Callable[[T], None]
    ) -> AsyncIterator[T | None]:
        """Whichever comes first: ``ready()``'s result (no slot held; the caller uses what it
        got) or a free slot (yields None; the slot is held for the body). ``ready`` must be
        cancellable without losing what it takes (it takes synchronously, after its last await);
        what it took is handed to ``give_back`` when the wait itself is cancelled."""
        token = object()
        got: list[T] = []
        slot = False

        async def wait_slot(scope: anyio.CancelScope) -> None:
            nonlocal slot
            await self._limiter.acquire_on_behalf_of(token)
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
                self._limiter.release_on_behalf_of(token)
            if got:
                give_back(got[0])
            raise
        if got:  # both may finish in one turn of the loop: the warm worker wins, the slot goes back
            if slot:
                self._limiter.release_on_behalf_of(token)
            yield got[0]
            return
        try:
            yield None
        finally:
            self._limiter.release_on_behalf_of(token)
