"""The record: one writer thread puts every exchange into SQLite without slowing the proxy.

The proxy calls the enqueue methods (``session_opened``, ``request``, ``response``...; see
``enqueue.py``): synchronous, an append to a bounded in-memory deque, no await, no disk, no
exception, so a full or locked disk never fails or delays a client's call (past the bounds an item
is dropped, counted and logged).
One writer task drains the deque: each turn takes what is queued and commits it in one transaction
(``batches.py``) on a plain ``sqlite3`` connection on the writer thread (``writer_thread.py``; one
hop per batch, aiosqlite hops per statement). What is queued while a batch is on the thread goes
in the next: under load, calls share a commit. Reading an answer's linked files and keeping its
screenshots happen there too, after the batch's commit (``Enrichment``).

Durability: SQLite's WAL with synchronous=NORMAL is the one log; a committed batch survives a
SIGKILL of the router (not a power loss). A tool answer leaves once its call's rows are committed
(``committed()``); a call's request is queued without waking the writer, so that it shares its
answer's commit (one commit per call), and is committed within ``ALONE_WAIT_S`` when no answer
comes; other rows nobody waits for (a session event) go in the writer's next batch. ``flush()``
waits for the linked files too.

Failing loudly: failed batches and rows are counted for /metrics and /healthz (``stats()``);
should the writer task itself die, ``on_writer_failure`` is told once.

Must be used from the event loop thread only (the enqueue methods are not thread-safe).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio

from router.layout import StateLayout
from router.record import schema
from router.record.batches import BatchWriter
from router.record.enqueue import RecordEnqueue
from router.record.queue import ItemQueue
from router.record.records import Records
from router.record.retention import Retention
from router.record.rows import Enrichment
from router.record.snapshots import normalize_console
from router.record.stats import RecordStats
from router.record.waiters import Waiters
from router.record.writer_thread import WriterThread

__all__ = ["Recorder", "normalize_console"]

log = logging.getLogger(__name__)

T = TypeVar("T")

BATCH_MAX: Final = 512
QUEUE_MAX: Final = 10_000
# Pending params and results held in memory at most; a screenshot answer is a few MB.
QUEUE_MAX_BYTES: Final = 64 * 1024 * 1024
SHUTDOWN_DRAIN_S: Final = 10.0
# A row queued without a batch of its own (a call's request: its answer's commit carries it) is
# committed within this even when no answer comes (a hung call stays visible after a crash).
ALONE_WAIT_S: Final = 1.0
ENRICH_MAX: Final = 64


class Recorder(RecordEnqueue):
    def __init__(
        self, db_path: Path, *, layout: StateLayout | None = None, retention_days: float = 30.0,
        queue_max: int = QUEUE_MAX, queue_max_bytes: int = QUEUE_MAX_BYTES,
        on_writer_failure: Callable[[str], None] | None = None,
    ) -> None:
        """``layout``: where the files a call linked are kept (``layout.files_dir(ref_id)``);
        without one, only snapshots and console text are kept. ``on_writer_failure(reason)`` runs
        once if the writer task dies: nothing is recorded any more, and the process should be
        restarted."""
        self.db_path = Path(db_path)
        self.layout = layout
        self._batches = BatchWriter(layout)
        self.on_writer_failure = on_writer_failure
        self._retention = Retention(self._batches, retention_days, self.call_in_writer)
        self.writer_failure: str | None = None  # why the writer task died, if it did
        self.records: Records | None = None  # read side, set while run() is active
        self._queue = ItemQueue(queue_max, queue_max_bytes)
        self._done = 0  # the last sequence number handled: committed() waits until it catches up
        self._waiters = Waiters()
        # Answers whose linked files are still to be read: queued after their batch's commit.
        self._enrich: deque[Enrichment] = deque()
        self._enrich_queued = 0
        self._enrich_done = 0
        self._wake = asyncio.Event()
        self._alone: asyncio.TimerHandle | None = None  # ALONE_WAIT_S's wake-up, one at a time
        self._writer_task: asyncio.Task[None] | None = None
        self._thread = WriterThread()

    # ---------------------------------------------------------------- enqueue (proxy hot path)

    def _put(self, kind: str, key: str, data: tuple[Any, ...], size: int, *, wake: bool = True) -> None:
        try:
            self._queue.put(kind, key, data, size)
            if wake:
                self._wake.set()
            elif self._alone is None and self._writer_task is not None:
                self._alone = asyncio.get_running_loop().call_later(ALONE_WAIT_S, self._wake_alone)
        except Exception:  # the proxy path must never see a recording problem
            log.exception("recorder: enqueue failed")

    def _wake_alone(self) -> None:
        self._alone = None
        self._wake.set()

    def stats(self) -> RecordStats:
        """The counters now. Read on the loop while the writer thread may be mid-batch: each is
        right on its own, a batch's rows and its failure may land in different readings."""
        return RecordStats.of(self._queue, self._batches, linked_reads=self._enrich_queued)

    @property
    def writer_alive(self) -> bool:
        return self.writer_failure is None and self._writer_task is not None and not self._writer_task.done()

    # ---------------------------------------------------------------- lifecycle

    @asynccontextmanager
    async def run(self) -> AsyncIterator[Recorder]:
        """Open (create, migrate) the file, mark sessions a dead run left live as 'interrupted',
        prune, then write until exit; on exit drain what is queued (bounded time)."""
        self._wake = asyncio.Event()  # bound to this loop
        async with self._thread.open(self.db_path):
            interrupted = await self.call_in_writer(schema.mark_interrupted)
            if interrupted:
                log.warning("recorder: %d session(s) of a previous run marked interrupted", interrupted)
            await self.prune()
            async with Records.open(self.db_path, before_read=self.flush) as records:
                self.records = records
                self._writer_task = asyncio.create_task(self._writer(), name="recorder-writer")
                pruner = asyncio.create_task(self._retention.forever(), name="recorder-pruner")
                try:
                    yield self
                finally:
                    # Shielded: the lifespan may be exiting because of a cancellation, and what is
                    # queued is exactly the record of the last calls.
                    with anyio.CancelScope(shield=True):
                        pruner.cancel()
                        with anyio.move_on_after(SHUTDOWN_DRAIN_S):
                            await self.flush()
                        self._writer_task.cancel()
                        await asyncio.gather(self._writer_task, pruner, return_exceptions=True)
                        if self._alone is not None:
                            self._alone.cancel()
                            self._alone = None
                        self._writer_task = None
                        self.records = None
                    if self._queue:
                        log.warning("recorder: %d item(s) not written at shutdown", len(self._queue))

    async def committed(self) -> bool:
        """Waits until everything enqueued so far is committed (the writer's next batch): what a
        tool answer waits for before it leaves, so that a SIGKILL of the router loses no call the
        client saw answered.

        True when all of it was committed. False when any of it failed or was dropped (it is
        counted and logged already), or when the writer is not running (returns at once then).
        Never raises: a caller that answers a client after it should log and answer anyway.
        """
        target = self._queue.enqueued
        if self._done >= target:
            return True
        if not self.writer_alive:
            return False
        self._wake.set()
        return await self._waiters.rows(self._done, target)

    async def flush(self) -> bool:
        """``committed()``, and the snapshots, console lines and files the answers linked read
        too (what readers of the record and whoever clears a worker's output dir need)."""
        ok = await self.committed()
        if self._enrich_done < self._enrich_queued and self.writer_alive:
            self._wake.set()
            await self._waiters.linked(self._enrich_queued)
        return ok

    async def call_in_writer(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the writer thread, serialised with the batches (prune, tests)."""
        return await self._thread.call(fn)

    async def prune(self, now: float | None = None) -> list[str]:
        """Deletes what is past the retention now (see retention.py); the session ids deleted."""
        return await self._retention.prune(now)

    # ---------------------------------------------------------------- the writer task

    async def _writer(self) -> None:
        try:
            while True:
                if self._queue:
                    batch = self._queue.take(BATCH_MAX)
                    lost: Sequence[int] = [item.seq for item in batch]  # unless the thread says otherwise
                    write = functools.partial(self._batches.write, batch=batch, dropped_total=self._queue.dropped)
                    try:
                        lost = await self.call_in_writer(write)
                    finally:
                        # Even when cancelled here the thread finishes the batch; count it handled.
                        self._batch_written(batch[-1].seq, lost)
                elif self._enrich:
                    jobs = [self._enrich.popleft() for _ in range(min(len(self._enrich), ENRICH_MAX))]
                    try:
                        await self.call_in_writer(functools.partial(self._batches.enrich, jobs=jobs))
                    finally:
                        self._enrich_done += len(jobs)
                        self._waiters.linked_done(self._enrich_done)
                elif self._batches.checkpoint_due:
                    await self.call_in_writer(self._batches.checkpoint)
                else:
                    self._wake.clear()
                    await self._wake.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._writer_died(exc)
        finally:
            self._waiters.release_all(self._done)  # nobody may wait forever on a stopped writer

    def _batch_written(self, last_seq: int, lost: Sequence[int]) -> None:
        self._done = last_seq
        self._waiters.rows_done(self._done, lost)
        jobs = self._batches.take_enrichments()
        self._enrich.extend(jobs)
        self._enrich_queued += len(jobs)

    def _writer_died(self, exc: Exception) -> None:
        """BatchWriter.write handles every database error itself: this is a bug or a broken executor.
        Nothing will be recorded any more; say so rather than limp on."""
        if self.writer_failure is not None:
            return
        self.writer_failure = f"recorder writer died: {exc!r}"
        log.critical("recorder: writer died, nothing is recorded any more", exc_info=exc)
        self._waiters.release_all(self._done)
        if self.on_writer_failure is not None:
            try:
                self.on_writer_failure(self.writer_failure)
            except Exception:
                log.exception("recorder: on_writer_failure callback failed")
