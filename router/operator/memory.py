"""What the dashboard shows of each worker's memory: its process tree's PSS
(workers/process_memory.py), sampled at most every couple of seconds."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final

import anyio.to_thread

from workers import process_memory

CACHE_SECONDS: Final = 2.0


class MemorySampler:
    """Caches ``tree_pss`` for a couple of seconds: a dashboard polling every second from two tabs
    must not turn into a /proc scan per request."""

    def __init__(self, ttl: float = CACHE_SECONDS) -> None:
        self.ttl = ttl
        self._at = -float("inf")
        self._roots: dict[str, int] = {}
        self._values: dict[str, int] = {}
        self._lock = anyio.Lock()

    async def sample(self, roots: Mapping[str, int]) -> dict[str, int]:
        async with self._lock:
            fresh = time.monotonic() - self._at < self.ttl
            if not fresh or dict(roots) != self._roots:
                wanted = dict(roots)
                self._values = await anyio.to_thread.run_sync(process_memory.tree_pss, wanted)
                self._roots, self._at = wanted, time.monotonic()
            return dict(self._values)
