"""Fixtures of the continuity tests: routers with real workers, and waiting on a session's state."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import RawClient, RouterThread, playwright_router, wait_for

SAVE_WAIT = 10.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/continuity/" in str(item.path) and "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="module")
def pw(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    """One router with real workers for a module; tests shorten its idle timeout when they reap."""
    with playwright_router(tmp_path_factory.mktemp("continuity"), chromium, idle_timeout=600) as router:
        yield router


def saved_state(state_dir: Path, session_id: str, needle: str) -> bool:
    """True once the session's saved browser state holds ``needle`` (a cookie value, a URL)."""
    try:
        return needle in (state_dir / "sessions" / session_id / "state.json").read_text()
    except OSError:
        return False


def wait_saved(state_dir: Path, client: RawClient, *needles: str) -> None:
    sid = client.session_id or ""
    wait_for(lambda: all(saved_state(state_dir, sid, n) for n in needles), timeout=SAVE_WAIT)


def state_file(state_dir: Path, session_id: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((state_dir / "sessions" / session_id / "state.json").read_text())
    return data
