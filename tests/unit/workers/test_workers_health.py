from __future__ import annotations

import pytest

from workers.health import RestartBudget


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_then_exhausted_then_recovers_after_window() -> None:
    clock = Clock()
    budget = RestartBudget(clock=clock)
    delays = []
    for _ in range(3):
        delays.append(budget.next_delay())
        budget.record_restart()
        clock.now += 10
    assert delays == [1.0, 2.0, 4.0]
    assert budget.exhausted and budget.next_delay() is None
    assert budget.retry_after() == pytest.approx(300 - 30)
    clock.now = 1000.0 + 300  # the first restart leaves the window
    assert not budget.exhausted
    assert budget.retry_after() == 0.0
    assert budget.next_delay() == 4.0  # two restarts still inside the window


def test_reset_and_validation() -> None:
    budget = RestartBudget(max_restarts=1, window=5, backoff=(0.5,), clock=Clock())
    budget.record_restart()
    assert budget.exhausted
    budget.reset()
    assert budget.next_delay() == 0.5
    with pytest.raises(ValueError):
        RestartBudget(backoff=())
