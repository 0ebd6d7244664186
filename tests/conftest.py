"""The suite's fixtures, one home each; the helpers they build on are in tests/support.

Tiers, by folder: ``tests/unit`` runs in this process (no subprocess at all), ``tests/integration``
runs routers against the stdlib stand-in worker, ``tests/e2e`` drives the real @playwright/mcp worker
and Chromium. A test that uses the ``chromium`` fixture (itself or through another fixture, such as
``pw_router``) is marked ``e2e`` and must live in ``tests/e2e``; outside it the router cannot find a
browser to launch.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.settings import find_browser
from tests.support import RouterThread, playwright_router, router_settings, serve_pages, wait_for
from tests.support.handshake_seeds import SEEDS_ENV
from workers.orphans import processes_for
from workers.spec import default_cli_path

# How long a test's workers (node + Chromium included) may take to go once it is done.
WORKERS_GONE_TIMEOUT = 15.0
# Outside e2e the router's browser is this path, so a real worker started by mistake fails loudly.
NO_BROWSER = "/nonexistent/browser-outside-e2e"
# Idle reaping must not surprise a module's shared real-worker router: tests that reap shorten it.
SHARED_ROUTER_IDLE_TIMEOUT = 600.0


E2E_DIR = Path(__file__).parent / "e2e"


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # A run ended by SIGTERM (scripts/test stopping the lifecycle model after another tier
    # failed, a CI timeout) unwinds as Ctrl-C does: fixtures and teardowns stop the routers and
    # workers they started. Python's default for SIGTERM ends the process on the spot and leaves
    # them running. (Background jobs of a script ignore SIGINT, so SIGINT cannot do this.)
    signal.signal(signal.SIGTERM, _interrupted)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced = []
    for item in items:
        if "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)
            if E2E_DIR not in item.path.parents:
                misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(f"tests that drive the real browser belong in tests/e2e: {misplaced}")
    # The lifecycle model is one test of minutes: handed out first, it runs beside all the others
    # instead of after them (xdist gives files out in this order).
    items.sort(key=lambda item: item.get_closest_marker("model") is None)


@pytest.fixture(autouse=True)
def _no_browser_outside_e2e(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("e2e") is None:
        monkeypatch.setenv("MCP_ROUTER_BROWSER", NO_BROWSER)


@pytest.fixture(scope="session", autouse=True)
def _handshake_seeds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One start-up probe per kind of worker for the run, per test process under xdist
    (tests/support/handshake_seeds.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SEEDS_ENV, str(tmp_path_factory.mktemp("handshake-seeds")))
        yield


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A state dir whose worker processes must all be gone when the test ends."""
    path = tmp_path / "state"
    path.mkdir()
    yield path
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not processes_for(path), timeout=WORKERS_GONE_TIMEOUT)
    left = processes_for(path)
    for pid in left:  # kill before failing, so one broken test does not leak into the next
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


@pytest.fixture(scope="module")
def fake_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    """One router with the stand-in worker and the record off, shared by a module."""
    state = tmp_path_factory.mktemp("router")
    with RouterThread(router_settings(state)) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=WORKERS_GONE_TIMEOUT)


@pytest.fixture(scope="module")
def rec_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    """One router with the stand-in worker and the record on, shared by a module."""
    state = tmp_path_factory.mktemp("rec-router")
    with RouterThread(router_settings(state, record=True)) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=WORKERS_GONE_TIMEOUT)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser the real workers use (scripts/setup makes sure there is one)."""
    path = find_browser()
    assert path, "no Chromium found: scripts/setup installs one, or set MCP_ROUTER_BROWSER"
    assert default_cli_path().exists(), "workers/node_modules missing: run scripts/setup"
    return path


@pytest.fixture(scope="module")
def pw_router(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    """One router with real @playwright/mcp workers and the record on, shared by a module."""
    state = tmp_path_factory.mktemp("pw-router")
    with playwright_router(state, chromium, idle_timeout=SHARED_ROUTER_IDLE_TIMEOUT) as router:
        yield router


@pytest.fixture(scope="session")
def pages() -> Iterator[str]:
    """The test pages (tests.support.pages), served on 127.0.0.1 for the real browsers."""
    with serve_pages() as base:
        yield base
