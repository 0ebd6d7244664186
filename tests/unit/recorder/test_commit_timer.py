"""The recorder's one commit timer (router/record/commit_timer.py): the earliest deadline wins."""

from __future__ import annotations

import asyncio

from router.record.commit_timer import CommitTimer
from tests.support.wait import async_wait_for


async def test_an_earlier_deadline_replaces_a_later_one_and_a_later_one_does_not() -> None:
    fired: list[float] = []
    loop = asyncio.get_running_loop()
    timer = CommitTimer(lambda: fired.append(loop.time()))
    start = loop.time()
    timer.within(30.0)  # a lone request's delay
    timer.within(0.05)  # an answer's: sooner, so it wins
    timer.within(10.0)  # later than what is set: changes nothing
    await async_wait_for(lambda: fired)
    assert len(fired) == 1 and fired[0] - start < 5.0
    await asyncio.sleep(0.1)  # the replaced deadlines are gone, not pending
    assert len(fired) == 1


async def test_a_cancelled_timer_does_not_fire_and_can_be_set_again() -> None:
    fired: list[int] = []
    timer = CommitTimer(lambda: fired.append(1))
    timer.within(0.02)
    timer.cancel()
    await asyncio.sleep(0.1)
    assert fired == []
    timer.within(0.02)
    await async_wait_for(lambda: fired == [1])
