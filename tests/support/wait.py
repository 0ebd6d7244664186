"""Waiting on conditions, the one way tests synchronise with threads and processes (never sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from tests.support.auth import auth_headers

if TYPE_CHECKING:
    from tests.support.routers import RouterThread

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


def wait_recorded(router: RouterThread, timeout: float = WAIT_TIMEOUT) -> None:
    """Until everything the router has queued for its record so far is committed to its
    ``router.db``, with what the answers linked: the operator API flushes the record before it
    reads it. (A tool answer leaves once its own rows are committed; a session's events and the
    files its answers linked follow in the writer's next batches.)"""
    answer = httpx.get(
        f"{router.base_url}/api/sessions", headers=auth_headers(router.token), timeout=timeout, trust_env=False
    )
    assert answer.status_code == 200, answer.text
