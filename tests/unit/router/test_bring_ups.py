"""BringUps: the one queue for worker bring-ups, and a resume that takes a warm worker instead of
waiting for its turn; the reserve's memory guard."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from router.sessions.bringup import (
    RESERVE_FREE_FLOOR,
    WARM_WORKER_BYTES,
    BringUps,
    memory_below_floor,
    room_for_another_warm_worker,
)

WITHIN = 5.0


async def test_at_most_limit_bring_ups_run_and_the_rest_wait_their_turn() -> None:
    bring_ups = BringUps(2)
    running: list[int] = []
    peak = 0
    order: list[int] = []
    release = anyio.Event()

    async def bring_up(n: int) -> None:
        nonlocal peak
        async with bring_ups.slot():
            running.append(n)
            peak = max(peak, len(running))
            order.append(n)
            await release.wait()
            running.remove(n)

    with anyio.fail_after(WITHIN):
        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(bring_up, n)
                await anyio.wait_all_tasks_blocked()
            assert bring_ups.running == 2 and bring_ups.waiting == 3
            release.set()
    assert peak == 2
    assert order == [0, 1, 2, 3, 4]  # first come, first served


async def test_a_client_waiting_goes_before_the_pools_refills_that_came_first() -> None:
    # A refill queued first must not make a new conversation or a resume wait behind it.
    bring_ups = BringUps(1)
    order: list[str] = []
    release = anyio.Event()

    async def bring_up(name: str, urgent: bool) -> None:
        async with bring_ups.slot(urgent=urgent):
            order.append(name)
            await release.wait()

    with anyio.fail_after(WITHIN):
        async with anyio.create_task_group() as tg:
            for name, urgent in (("refill-0", False), ("refill-1", False), ("client-0", True),
                                 ("refill-2", False), ("client-1", True)):
                tg.start_soon(bring_up, name, urgent)
                await anyio.wait_all_tasks_blocked()
            assert order == ["refill-0"] and bring_ups.waiting == 4
            release.set()
    assert order == ["refill-0", "client-0", "client-1", "refill-1", "refill-2"]
    assert bring_ups.running == 0 and bring_ups.waiting == 0


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancelled-then-freed", "freed-then-cancelled"])
async def test_a_cancelled_waiter_never_loses_a_slot(cancel_first: bool) -> None:
    bring_ups = BringUps(1)
    got: list[str] = []

    async def waiter(name: str, scope: anyio.CancelScope) -> None:
        with scope:
            async with bring_ups.slot():
                got.append(name)

    with anyio.fail_after(WITHIN):
        async with AsyncExitStack() as holder, anyio.create_task_group() as tg:
            await holder.enter_async_context(bring_ups.slot())
            first, second = anyio.CancelScope(), anyio.CancelScope()
            tg.start_soon(waiter, "first", first)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(waiter, "second", second)
            await anyio.wait_all_tasks_blocked()
            # The first waiter is cancelled in the same turn as the holder lets go, either order:
            # the slot ends up with someone, and is free at the end.
            if cancel_first:
                first.cancel()
            await holder.aclose()
            first.cancel()
    assert got[-1:] == ["second"] and (got == ["second"] or not cancel_first)
    assert bring_ups.running == 0 and bring_ups.waiting == 0


async def test_a_free_slot_is_taken_and_held_for_the_body() -> None:
    bring_ups = BringUps(1)
    never = anyio.Event()

    async def ready() -> str:
        await never.wait()
        return "warm"

    with anyio.fail_after(WITHIN):
        async with bring_ups.slot_or(ready, give_back=lambda _: None) as warm:
            assert warm is None
            assert bring_ups.running == 1
    assert bring_ups.running == 0


async def test_a_warm_worker_ready_before_a_slot_is_taken_instead() -> None:
    bring_ups = BringUps(1)
    became_ready = anyio.Event()
    given_back: list[str] = []

    async def ready() -> str:
        await became_ready.wait()
        return "warm"

    with anyio.fail_after(WITHIN):
        async with bring_ups.slot():  # another session's spawn holds the only slot
            async with anyio.create_task_group() as tg:
                got: list[str | None] = []

                async def resume() -> None:
                    async with bring_ups.slot_or(ready, given_back.append) as warm:
                        got.append(warm)
                        assert bring_ups.running == 1  # the spawn's slot only: none taken for us

                tg.start_soon(resume)
                await anyio.wait_all_tasks_blocked()
                assert bring_ups.waiting == 1
                became_ready.set()
            assert got == ["warm"]
            assert bring_ups.waiting == 0  # it left the queue
    assert given_back == [] and bring_ups.running == 0


async def test_a_warm_worker_taken_by_a_cancelled_wait_is_given_back() -> None:
    bring_ups = BringUps(1)
    given_back: list[str] = []

    with anyio.fail_after(WITHIN):
        async with bring_ups.slot():  # the only slot is busy: the warm worker comes first
            with anyio.CancelScope() as request:

                async def ready() -> str:
                    request.cancel()  # the client went away just as a warm worker was taken
                    return "warm"

                async with bring_ups.slot_or(ready, given_back.append):
                    pytest.fail("the body must not run")
    assert given_back == ["warm"]
    assert bring_ups.running == 0 and bring_ups.waiting == 0


@pytest.mark.parametrize(
    ("available", "room"),
    [
        (None, True),
        (RESERVE_FREE_FLOOR + WARM_WORKER_BYTES, True),
        (RESERVE_FREE_FLOOR + WARM_WORKER_BYTES - 1, False),
        (0, False),
    ],
)
def test_the_reserve_grows_only_while_memory_stays_above_the_floor(available: int | None, room: bool) -> None:
    assert room_for_another_warm_worker(lambda: available) is room


@pytest.mark.parametrize(
    ("available", "short"),
    [(None, False), (RESERVE_FREE_FLOOR, False), (RESERVE_FREE_FLOOR - 1, True), (0, True)],
)
def test_the_reserve_shrinks_only_below_the_floor_a_worker_under_where_it_grows(
    available: int | None, short: bool
) -> None:
    assert memory_below_floor(lambda: available) is short
    if short:  # never both: a trimmed worker is not refilled at once
        assert not room_for_another_warm_worker(lambda: available)


def test_an_unknown_core_count_still_allows_one_bring_up(monkeypatch: Any) -> None:
    from router.sessions import bringup

    monkeypatch.setattr(bringup.os, "cpu_count", lambda: None)
    assert bringup.default_bring_ups() == 1
