"""The session lifecycle's property-based model (tests/integration/model/model.py), run against the real
router with the stand-in worker: ``scripts/test -m model``."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.integration.model.model import LifecycleModel

pytestmark = pytest.mark.model


@pytest.mark.timeout(900)
def test_session_lifecycle() -> None:
    run_state_machine_as_test(LifecycleModel, settings=settings())  # the profile loaded: conftest.py
