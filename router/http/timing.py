"""Per-request timing shared by the /mcp timing wrapper and the request's exchange.

It travels in the ASGI scope's per-request ``state`` (uvicorn copies it for every request), so
the wrapper, the endpoint and the exchange hand it to one another explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from starlette.types import Scope

TIMING_KEY: Final = "mcp_router.timing"


@dataclass
class RequestTiming:
    """The exchange writes how long the worker took; the wrapper subtracts it from the whole
    request's time to get the router-added latency."""

    upstream_s: float | None = None
    # A request that had to start a worker (spawn, resume) mostly waited for that; the spawn
    # histogram measures it, so such a request is left out of the router-added figure.
    started_worker: bool = False

    def router_share(self, whole_s: float) -> float | None:
        """The router's share of a request that took ``whole_s``: its time less the worker's;
        None when the worker's is unknown or the request had to start a worker."""
        if self.upstream_s is None or self.started_worker:
            return None
        return max(whole_s - self.upstream_s, 0.0)


def request_timing(scope: Scope) -> RequestTiming | None:
    state = scope.get("state")
    timing = state.get(TIMING_KEY) if isinstance(state, dict) else None
    return timing if isinstance(timing, RequestTiming) else None


def attach_timing(scope: Scope) -> tuple[Scope, RequestTiming]:
    """A scope for this request that carries a fresh RequestTiming."""
    timing = RequestTiming()
    state = scope.get("state")
    return {**scope, "state": {**(state if isinstance(state, dict) else {}), TIMING_KEY: timing}}, timing
