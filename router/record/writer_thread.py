"""The record's one SQLite connection and the one thread that uses it.

Batches, linked-file reads, checkpoints and prunes run on that thread one at a time (a ``sqlite3``
call there holds no event loop, even while it waits for another connection's write lock, up to
schema.BUSY_TIMEOUT_MS). Nothing else uses the connection.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, TypeVar

import anyio

from router.record import schema

T = TypeVar("T")

# The WAL file is cut back to this when it starts over after a checkpoint (a burst of big answers
# must not leave it large for the router's lifetime).
WAL_SIZE_LIMIT: Final = 32 * 1024 * 1024


class WriterThread:
    def __init__(self) -> None:
        self.conn: sqlite3.Connection | None = None  # set while open()
        self._executor: ThreadPoolExecutor | None = None

    @asynccontextmanager
    async def open(self, db_path: Path) -> AsyncIterator[WriterThread]:
        """Open (create, migrate) the file on the thread; on exit close it there, even when
        cancelled (what a batch wrote is committed; the connection must not leak)."""
        loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recorder")
        try:
            self.conn = await loop.run_in_executor(self._executor, schema.connect_or_replace, db_path)
            self.conn.execute("PRAGMA wal_autocheckpoint = 0")  # see batches.CHECKPOINT_EVERY
            self.conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            yield self
        finally:
            conn, self.conn = self.conn, None
            with anyio.CancelScope(shield=True):
                if conn is not None:
                    await loop.run_in_executor(self._executor, conn.close)
                self._executor.shutdown(wait=True)
            self._executor = None

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(conn)`` on the thread, after the jobs before it."""
        if self._executor is None or self.conn is None:
            raise RuntimeError("recorder is not running")
        return await asyncio.wrap_future(self._executor.submit(fn, self.conn))
