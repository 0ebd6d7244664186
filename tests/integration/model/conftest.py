"""The model's hypothesis profiles: ``ci`` (the default here: at least 100 examples in about five
minutes on two cores) and ``deep`` for long local runs (``--hypothesis-profile deep``)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# Each example starts a router process; a step waits for the router to settle, so examples are
# seconds long by nature: no per-example deadline, and no complaint that data generation is slow.
_SLOW_BY_DESIGN = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile(
    "ci", max_examples=100, stateful_step_count=10, deadline=None, suppress_health_check=_SLOW_BY_DESIGN,
    derandomize=False, print_blob=True,
)  # fmt: skip
settings.register_profile(
    "quick", max_examples=15, stateful_step_count=12, deadline=None, suppress_health_check=_SLOW_BY_DESIGN,
)  # fmt: skip
settings.register_profile(
    "deep", max_examples=2000, stateful_step_count=40, deadline=None, suppress_health_check=_SLOW_BY_DESIGN,
    print_blob=True,
)  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("ci")
