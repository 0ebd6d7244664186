from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import RouterThread, router_settings, wait_for
from workers.orphans import processes_for


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
