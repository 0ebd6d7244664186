"""The unit tier runs in this process: a test that starts a process fails at once, so a slow test
cannot creep in here (routers and stand-in workers belong in tests/integration)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

SPAWNERS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")


def _refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise AssertionError("a unit test started a process: move it to tests/integration")


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    for name in SPAWNERS:
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse)
    yield
