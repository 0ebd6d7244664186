"""Restart policy per session: at most N restarts in a sliding window, with backoff; and the
liveness probe the router runs on each worker.

The policy is pure logic with an injectable clock, so the router decides when to respawn and tests need no
sleeping. Past the budget a session is "degraded": answer 503 with ``retry_after()``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import anyio

from .ports import LOOPBACK

if TYPE_CHECKING:
    from .supervisor import Worker

__all__ = ["HEALTH_FAILURES", "HEALTH_INTERVAL", "RestartBudget", "probe"]

HEALTH_INTERVAL: Final = 30.0  # seconds between checks of one worker
HEALTH_FAILURES: Final = 3  # failed checks in a row before the worker is restarted
# Node answers in milliseconds while its event loop runs, busy with a tool call or not; a stuck
# loop never does. Three misses in a row (HEALTH_FAILURES) restart the worker.
PROBE_TIMEOUT: Final = 5.0
PROBE_PATH: Final = "/mcp-router-health"
STATUS_LINE_MAX: Final = 1024  # bytes read for the status line at most


async def probe(worker: Worker) -> bool:
    """Alive, and its HTTP server answering within PROBE_TIMEOUT. A node busy with a long tool
    call still answers (its event loop runs while it waits on the browser), so such a call never
    fails this; a stopped process, or one whose event loop is stuck, does: the kernel still
    accepts its connections into the listen backlog, so only an answer shows that it serves."""
    if not worker.alive():
        return False
    with anyio.move_on_after(PROBE_TIMEOUT):
        return await _answers_http(worker.port, worker.host_header)
    return False


async def _answers_http(port: int, host_header: str) -> bool:
    """True when the HTTP server on the loopback ``port`` answers a request, whatever its status."""
    try:
        stream = await anyio.connect_tcp(LOOPBACK, port)
    except OSError:
        return False
    try:
        # A path the worker does not serve: its answer (404, or 403 for a Host it refuses) does
        # nothing there, and costs less than any MCP request would.
        request = f"GET {PROBE_PATH} HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n"
        await stream.send(request.encode())
        head = b""
        while b"\r\n" not in head and len(head) < STATUS_LINE_MAX:
            head += await stream.receive()
        return head.startswith(b"HTTP/1.")
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
        return False
    finally:
        await stream.aclose()


class RestartBudget:
    def __init__(
        self,
        max_restarts: int = 3,
        window: float = 300.0,
        backoff: Sequence[float] = (1.0, 2.0, 4.0),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_restarts < 0 or window <= 0 or not backoff:
            raise ValueError("need max_restarts >= 0, window > 0 and at least one backoff step")
        self.max_restarts = max_restarts
        self.window = window
        self.backoff = tuple(backoff)
        self._clock = clock
        self._restarts: deque[float] = deque()

    def _prune(self) -> float:
        now = self._clock()
        while self._restarts and now - self._restarts[0] >= self.window:
            self._restarts.popleft()
        return now

    @property
    def recent(self) -> int:
        """Restarts inside the current window."""
        self._prune()
        return len(self._restarts)

    @property
    def exhausted(self) -> bool:
        return self.recent >= self.max_restarts

    def next_delay(self) -> float | None:
        """Seconds to wait before the next restart, or None when the budget is spent."""
        count = self.recent
        if count >= self.max_restarts:
            return None
        return self.backoff[min(count, len(self.backoff) - 1)]

    def record_restart(self) -> None:
        self._restarts.append(self._prune())

    def retry_after(self) -> float:
        """Seconds until a restart is allowed again (0 when one is allowed now)."""
        now = self._prune()
        if len(self._restarts) < self.max_restarts:
            return 0.0
        # The budget reopens when enough of the oldest restarts have left the window.
        oldest_that_must_expire = self._restarts[len(self._restarts) - self.max_restarts]
        return max(0.0, oldest_that_must_expire + self.window - now)

    def reset(self) -> None:
        self._restarts.clear()
