"""The record's in-memory queue: bounded in items and bytes, numbered, never waited for.

Past either bound an item is dropped, counted and logged (once per interval); a drop marker takes
its place in the stream (consecutive drops share one), so a flush covering it answers False and
the writer notes it in ``recorder_failures``. Loop-side only.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Final

from router.record.rows import Item

log = logging.getLogger("router.record.recorder")

DROP_LOG_INTERVAL_S: Final = 10.0


class ItemQueue:
    def __init__(self, max_items: int, max_bytes: int) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.dropped = 0  # items refused because the queue was full
        self.enqueued = 0  # the last sequence number given out
        self.items = 0  # real items queued (drop markers excluded)
        self.bytes = 0
        self._queue: deque[Item] = deque()
        self._drop_logged_at = -DROP_LOG_INTERVAL_S

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, kind: str, key: str, data: tuple[Any, ...], size: int) -> int:
        """Queues an item; its sequence number (0: dropped)."""
        if self.items >= self.max_items or self.bytes + size > self.max_bytes:
            self._drop(size)
            return 0
        self.enqueued += 1
        self._queue.append(Item(kind, time.time(), key, data, self.enqueued, size))
        self.items += 1
        self.bytes += size
        return self.enqueued

    def take(self, most: int) -> list[Item]:
        batch = [self._queue.popleft() for _ in range(min(len(self._queue), most))]
        for item in batch:
            if item.kind != "dropped":
                self.items -= 1
                self.bytes -= item.size
        return batch

    def _drop(self, size: int) -> None:
        self.dropped += 1
        last = self._queue[-1] if self._queue else None
        if last is not None and last.kind == "dropped":
            self._queue[-1] = Item("dropped", last.ts, "", (last.data[0] + 1,), last.seq, 0)
        else:
            self.enqueued += 1
            self._queue.append(Item("dropped", time.time(), "", (1,), self.enqueued, 0))
        now = time.monotonic()
        if now - self._drop_logged_at >= DROP_LOG_INTERVAL_S:
            self._drop_logged_at = now
            log.error(
                "recorder: queue full (%d items, %d bytes pending; an item of %d bytes refused): "
                "%d item(s) dropped since start, calls go on unrecorded",
                self.items, self.bytes, size, self.dropped,
            )
