from __future__ import annotations

from collections.abc import Iterator

import pytest

from router.settings import find_browser
from tests.e2e.pages import serve_pages
from tests.support import RouterThread, router_settings, wait_for
from workers.orphans import processes_for
from workers.spec import default_cli_path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def browser() -> str:
    path = find_browser()
    assert path, "no Chromium found: scripts/setup installs one, or set MCP_ROUTER_BROWSER"
    assert default_cli_path().exists(), "workers/node_modules missing: run scripts/setup"
    return path


@pytest.fixture(scope="session")
def pages() -> Iterator[str]:
    with serve_pages() as base:
        yield base


@pytest.fixture(scope="module")
def pw_router(tmp_path_factory: pytest.TempPathFactory, browser: str) -> Iterator[RouterThread]:
    """One router with real @playwright/mcp workers, shared by a module."""
    state = tmp_path_factory.mktemp("pw-router")
    settings = router_settings(state, worker_command=None, browser=browser, record=True)
    with RouterThread(settings) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=20)
