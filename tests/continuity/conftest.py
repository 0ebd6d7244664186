"""Fixtures of the continuity tests: routers with real workers, and waiting on a session's state."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.settings import find_browser
from tests.e2e.pages import serve_pages
from tests.support import RawClient, RouterThread, router_settings, wait_for
from workers.orphans import processes_for
from workers.spec import default_cli_path

SAVE_WAIT = 10.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/continuity/" in str(item.path) and "real_worker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def real_worker() -> str:
    path = find_browser()
    assert path, "no Chromium found: scripts/setup installs one, or set MCP_ROUTER_BROWSER"
    assert default_cli_path().exists(), "workers/node_modules missing: run scripts/setup"
    return path


@pytest.fixture(scope="session")
def site() -> Iterator[str]:
    with serve_pages() as base:
        yield base


@pytest.fixture(scope="module")
def pw(tmp_path_factory: pytest.TempPathFactory, real_worker: str) -> Iterator[RouterThread]:
    """One router with real workers for a module; tests shorten its idle timeout when they reap."""
    state = tmp_path_factory.mktemp("continuity")
    settings = router_settings(state, worker_command=None, browser=real_worker, record=True, idle_timeout=600)
    with RouterThread(settings) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=20)


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
