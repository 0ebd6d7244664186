from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from router.settings import find_browser
from tests.e2e.pages import serve_pages
from tests.support import RouterThread, router_settings, wait_for
from workers.orphans import processes_for
from workers.spec import default_cli_path


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    # Every test reaps what it spawns: nothing carrying this state dir may outlive the test.
    wait_for(lambda: not processes_for(tmp_path), timeout=15)


@pytest.fixture(scope="module")
def fake_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    """One router with the stand-in worker, shared by a module's protocol tests."""
    state = tmp_path_factory.mktemp("router")
    with RouterThread(router_settings(state)) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=15)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser the real workers use (scripts/setup makes sure there is one)."""
    path = find_browser()
    assert path, "no Chromium found: scripts/setup installs one, or set MCP_ROUTER_BROWSER"
    assert default_cli_path().exists(), "workers/node_modules missing: run scripts/setup"
    return path


@pytest.fixture(scope="session")
def pages() -> Iterator[str]:
    """The test pages, served on 127.0.0.1 for the real browsers."""
    with serve_pages() as base:
        yield base
