"""Per-request timing shared by the /mcp timing wrapper and the request's exchange.

It travels in the ASGI scope's per-request ``state`` (uvicorn copies it for every request), so
the wrapper, the endpoint and the exchange hand it to one another explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from router.operator.metrics import Metrics

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


class TimedEndpoint:
    """Wraps the /mcp endpoint: the request's whole time minus the worker's share (written by the
    exchange into the request's RequestTiming) is the router-added latency."""

    def __init__(self, app: ASGIApp, metrics: Metrics, clock: Callable[[], float] = time.perf_counter) -> None:
        self.app = app
        self.metrics = metrics
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        scope, timing = attach_timing(scope)
        started = self.clock()
        try:
            await self.app(scope, receive, send)
        finally:
            added = timing.router_share(self.clock() - started)
            if added is not None:
                self.metrics.router_seconds.observe(added)

