"""Helpers shared by the workers tests (a plain module: conftest.py is not importable by name)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAKE_GROUP_CHILD = HERE / "fake_group_child.py"
PY = sys.executable


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
