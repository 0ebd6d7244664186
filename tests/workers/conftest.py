from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers import orphans


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A state dir whose worker processes must all be gone when the test ends."""
    path = tmp_path / "state"
    path.mkdir()
    yield path
    left = orphans.processes_for(path)
    for pid in left:  # kill before failing, so one broken test does not leak into the next
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
