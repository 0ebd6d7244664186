"""The record's one SQLite connection and the one thread that uses it.

Batches, linked-file reads and prunes run on that thread one at a time (a ``sqlite3`` call there
holds no event loop). The loop may use the connection itself, for the small commit a tool answer
waits for, only while no job is on the thread (``idle``): the connection is never used by two
threads at once.

The connection rests with busy_timeout 0: the loop must never wait for another connection's write
lock, and its commit is on every tool answer's path, so it does not pay two PRAGMAs per commit to
say so. A job on the thread, which may wait, raises the timeout for its own run.
"""

from __future__ import annotations

import asyncio
import contextlib
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
        self._jobs = 0

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
            self.conn.execute("PRAGMA busy_timeout = 0")
            yield self
        finally:
            conn, self.conn = self.conn, None
            with anyio.CancelScope(shield=True):
                if conn is not None:
                    await loop.run_in_executor(self._executor, conn.close)
                self._executor.shutdown(wait=True)
            self._executor = None

    @property
    def idle(self) -> bool:
        """No job on the thread: the loop may use ``conn`` now."""
        return self._jobs == 0

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(conn)`` on the thread, after the jobs before it."""
        if self._executor is None or self.conn is None:
            raise RuntimeError("recorder is not running")
        conn = self.conn
        loop = asyncio.get_running_loop()
        self._jobs += 1
        job = self._executor.submit(_patiently, fn, conn)
        # Counted off when the thread is done with it, not when its awaiter is: a cancelled
        # await (a prune at shutdown) leaves the job running, and the loop must not commit then.
        job.add_done_callback(lambda _: loop.call_soon_threadsafe(self._job_done))
        return await asyncio.wrap_future(job)

    def _job_done(self) -> None:
        self._jobs -= 1


def _patiently(fn: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
    """``fn(conn)`` allowed to wait for another connection's write lock, as the thread may; the
    connection goes back to not waiting before the loop can use it again. (Only a closed or broken
    connection refuses a PRAGMA: ``fn`` then meets and counts that error itself.)"""
    with contextlib.suppress(sqlite3.Error):
        conn.execute(f"PRAGMA busy_timeout = {schema.BUSY_TIMEOUT_MS}")
    try:
        return fn(conn)
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA busy_timeout = 0")
