from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import RouterThread, playwright_router


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="module")
def pw_router(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    """One router with real @playwright/mcp workers, shared by a module."""
    with playwright_router(tmp_path_factory.mktemp("pw-router"), chromium) as router:
        yield router
