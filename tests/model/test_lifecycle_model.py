"""The session lifecycle's property-based model (tests/model/model.py), run against the real
router with the stand-in worker: ``scripts/test -m model``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.harness import HANDSHAKE_GLOB, RouterProcess
from tests.model.model import LifecycleModel
from tests.support.routers import spare_port

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def handshakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One router's start-up probe, so that each example starts from a filled handshake cache."""
    state = tmp_path_factory.mktemp("probe") / "state"
    state.mkdir()
    router = RouterProcess(state, spare_port(), [], None)
    try:
        router.start()
    finally:
        router.close()
    yield next(state.glob(HANDSHAKE_GLOB))


@pytest.mark.timeout(900)
def test_session_lifecycle(handshakes: Path) -> None:
    LifecycleModel.handshakes = handshakes
    run_state_machine_as_test(LifecycleModel, settings=settings())  # the profile loaded: conftest.py
