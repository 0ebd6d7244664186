"""Waiting on conditions, the one way tests synchronise with threads and processes (never sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from router.record import ahead

WAIT_TIMEOUT = 20.0
POLL_INTERVAL = 0.02


def wait_for(condition: Callable[[], Any], timeout: float = WAIT_TIMEOUT, interval: float = POLL_INTERVAL) -> Any:
    """Polls ``condition`` until it is truthy and returns its value; fails the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {condition}")
        time.sleep(interval)


async def async_wait_for(
    condition: Callable[[], Any], within: float = WAIT_TIMEOUT, interval: float = POLL_INTERVAL
) -> None:
    """``wait_for`` for async tests (the event loop runs while it polls); TimeoutError if not ``within``."""
    with anyio.fail_after(within):
        # Conditions on /proc or on other processes have no event to await: polling it is.
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(interval)


def wait_recorded(state_dir: Path, timeout: float = WAIT_TIMEOUT) -> None:
    """Until every call answered so far is committed to the router's ``router.db``: a tool answer
    leaves once its rows are in the write-ahead file, emptied when the commit after it is made."""
    db = Path(state_dir) / "router.db"
    wait_for(lambda: not ahead.holds_rows(db), timeout)
