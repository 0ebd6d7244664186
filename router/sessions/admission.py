"""Who may hold a worker: slots under ``max_live_workers``, spawning, and spawn-failure memory.

The manager (for sessions) and the warm pool (for its workers) both get their workers here. When
the cap is reached, the ``evictors`` are asked in order to give a slot back (the pool ends a warm
worker before any session is hibernated); they are plain callbacks, so no part calls back into
another's internals.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

from router.errors import ServiceUnavailable
from workers._exceptions import SpawnError
from workers.supervisor import Supervisor, Worker

if TYPE_CHECKING:
    from router.operator.metrics import Metrics

log = logging.getLogger("mcp_router.admission")

SPAWN_RETRY_AFTER: Final = 5
BUSY_RETRY_AFTER: Final = 5  # every live worker is busy: one call is usually done by then
SPAWN_FAILURE_LIMIT: Final = 3  # consecutive failures before spawning fails fast
SPAWN_COOLDOWN: Final = 10.0  # how long it fails fast before trying a spawn again

# Frees one slot for ``for_id`` and returns True, or returns False when it has nothing to give.
Evictor = Callable[[str], Awaitable[bool]]


class Admission:
    def __init__(self, supervisor: Supervisor, *, max_live_workers: int, metrics: Metrics | None = None) -> None:
        self.supervisor = supervisor
        self.max_live_workers = max(1, max_live_workers)
        self.metrics = metrics
        self.evictors: Sequence[Evictor] = ()
        self._slots: set[str] = set()  # ids that hold, or are getting, a worker
        self._failures = 0
        self._failed_at = 0.0
        self._error: SpawnError | None = None

    # -- slots -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, worker_id: object) -> bool:
        return worker_id in self._slots

    def has_room(self) -> bool:
        return len(self._slots) < self.max_live_workers

    def release(self, worker_id: str) -> None:
        """Synchronous: a slot freed here is free before anyone else can look."""
        self._slots.discard(worker_id)

    async def admit(self, worker_id: str) -> None:
        """A slot for ``worker_id``, asking the evictors for one when the cap is reached."""
        while worker_id not in self._slots:
            if self.has_room():
                self._slots.add(worker_id)
                return
            for evict in self.evictors:
                if await evict(worker_id):
                    break
            else:
                raise ServiceUnavailable(
                    f"All {self.max_live_workers} browser workers are busy; retry shortly",
                    retry_after=BUSY_RETRY_AFTER,
                )

    def try_admit(self, worker_id: str) -> bool:
        """A free slot or nothing: for the warm pool, which must never make a session sleep."""
        if worker_id in self._slots:
            return True
        if not self.has_room():
            return False
        self._slots.add(worker_id)
        return True

    # -- spawning --------------------------------------------------------------------------------

    def check_spawning(self) -> None:
        """Router-wide: when spawning keeps failing (no node, no browser), say so at once."""
        error = self._error
        if (
            error is not None
            and self._failures >= SPAWN_FAILURE_LIMIT
            and time.monotonic() - self._failed_at < SPAWN_COOLDOWN
        ):
            raise ServiceUnavailable(
                f"Browser workers cannot be started right now: {error}",
                data={"stderr": error.stderr_tail},
                retry_after=math.ceil(SPAWN_COOLDOWN),
            )

    async def spawn(self, worker_id: str, *, admitted: bool = False) -> Worker:
        """A slot (unless the caller already holds one) and a started worker under ``worker_id``."""
        self.check_spawning()
        if not admitted:
            await self.admit(worker_id)
        started = time.monotonic()
        try:
            worker = await self.supervisor.spawn(worker_id)
        except SpawnError as exc:
            self._slots.discard(worker_id)
            self._failures += 1
            self._failed_at = time.monotonic()
            self._error = exc
            if self.metrics is not None:
                self.metrics.spawn_failed()
            log.warning("spawn failed id=%s: %s", worker_id, exc)
            raise ServiceUnavailable(
                f"Could not start a browser worker: {exc}",
                data={"stderr": exc.stderr_tail},
                retry_after=SPAWN_RETRY_AFTER,
            ) from None
        except BaseException:
            self._slots.discard(worker_id)
            raise
        self._failures = 0
        if self.metrics is not None:
            self.metrics.spawned(time.monotonic() - started)
        return worker


class RateLimit:
    """A token bucket: ``rate`` a second on average, up to ``burst`` at once."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
