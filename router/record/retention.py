"""The record's retention: what is older than ``retention_days`` (rows, and the files kept with
them) is deleted when the recorder starts and every PRUNE_EVERY_S after, on the writer thread.
A session's directory is not the record's: the session lifecycle removes it on its own, shorter,
retention."""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Final

from router.record.batches import BatchWriter

log = logging.getLogger("router.record.recorder")

PRUNE_EVERY_S: Final = 3600.0
DAY_S: Final = 86400.0

RunInWriter = Callable[[Callable[[sqlite3.Connection], list[str]]], Awaitable[list[str]]]


class Retention:
    def __init__(self, batches: BatchWriter, retention_days: float, run_in_writer: RunInWriter) -> None:
        self.batches = batches
        self.retention_days = retention_days
        self.run_in_writer = run_in_writer

    async def prune(self, now: float | None = None) -> list[str]:
        """Deletes what is past the retention; the ids of the sessions deleted (none when it
        failed: that is logged, and the next prune tries again)."""
        cutoff = (time.time() if now is None else now) - self.retention_days * DAY_S
        try:
            return await self.run_in_writer(functools.partial(self.batches.prune, cutoff=cutoff))
        except Exception as exc:
            log.warning("recorder: prune failed: %s", exc)
            return []

    async def forever(self) -> None:
        while True:
            await asyncio.sleep(PRUNE_EVERY_S)  # a timer, not synchronisation
            pruned = await self.prune()
            if pruned:
                log.info("recorder: pruned %d session(s)", len(pruned))
