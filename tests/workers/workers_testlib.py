"""Helpers shared by the workers tests (a plain module: conftest.py is not importable by name)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
FAKE_GROUP_CHILD = HERE / "fake_group_child.py"
PY = sys.executable


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll a condition (sync code has nothing better to wait on); True when it held in time."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


async def async_wait_for(predicate: Callable[[], bool], within: float = 10.0, interval: float = 0.02) -> None:
    """Await a condition; fails the test (TimeoutError) if it does not hold ``within`` seconds."""
    with anyio.fail_after(within):
        # Conditions on /proc or on other processes have no event to await: polling it is.
        while not predicate():  # noqa: ASYNC110
            await anyio.sleep(interval)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def read_pids(pidfile: Path) -> tuple[int, int]:
    child, grandchild = pidfile.read_text().split()
    return int(child), int(grandchild)
