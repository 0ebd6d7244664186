from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import RouterThread, router_settings, wait_for
from workers.orphans import processes_for


@pytest.fixture(scope="module")
def rec_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    """A router with the stand-in worker and the record on, shared by a module."""
    state = tmp_path_factory.mktemp("op-router")
    with RouterThread(router_settings(state, record=True)) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=15)


def base_url(router: RouterThread) -> str:
    return f"http://127.0.0.1:{router.port}"
