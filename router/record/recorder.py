"""The record: one writer task puts every exchange into SQLite without slowing the proxy.

The proxy calls the enqueue methods (``session_opened``, ``request``, ``response``...; see
``enqueue.py``): synchronous, an append to a bounded in-memory deque, no await, no disk, no
exception, so a full or locked disk never fails or delays a client's call (past the bounds an item
is dropped, counted and logged).
One writer task drains the deque in batches, each one transaction (``batches.py``) on a plain
``sqlite3`` connection on a dedicated thread (one hop per batch; aiosqlite hops per statement).
Reading an answer's linked files and keeping its screenshots happen there too, after the batch's
commit (``Enrichment``).

Durability: WAL + synchronous=NORMAL; a committed batch survives SIGKILL of the router. A row is
on disk at most WRITE_DELAY_S after it was enqueued (``commit_timer.py``). ``flush()`` waits for
the commit and says whether all of it was committed; while the writer thread is idle and little is
queued, it commits on the event loop itself, no thread hops. Under load the thread's batches are
the group commit. A tool answer waits for less: ``write_ahead()`` puts what is queued in the
write-ahead file (``ahead.py``, one ``write()``), ``settle()`` commits it within SETTLE_DELAY_S
once the answer has left (answers in that time share the commit), and a router that died in
between replays that file when it next starts.

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
from router.record import ahead, schema
from router.record.batches import BatchWriter, rollback
from router.record.commit_timer import SETTLE_DELAY_S, WRITE_DELAY_S, CommitTimer
from router.record.enqueue import RecordEnqueue
from router.record.queue import ItemQueue
from router.record.records import Records
from router.record.retention import Retention
from router.record.rows import Enrichment, Item
from router.record.snapshots import Extracted, normalize_console
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
# flush() commits on the loop itself when the writer thread is idle and at most this many items
# are queued (one call's request and answer, a session event or two).
INLINE_MAX: Final = 8
ENRICH_MAX: Final = 64


class Recorder(RecordEnqueue):
    def __init__(
        self, db_path: Path, *, layout: StateLayout | None = None, retention_days: float = 30.0,
        queue_max: int = QUEUE_MAX, queue_max_bytes: int = QUEUE_MAX_BYTES,
        on_writer_failure: Callable[[str], None] | None = None, settle_delay: float = SETTLE_DELAY_S,
    ) -> None:
        """``layout``: where the files a call linked are kept (``layout.files_dir(ref_id)``);
        without one, only snapshots and console text are kept. ``on_writer_failure(reason)`` runs
        once if the writer task dies: nothing is recorded any more, and the process should be
        restarted. ``settle_delay``: how long the commit after an answer waits for others (0: none)."""
        self.db_path = Path(db_path)
        self.layout = layout
        self._batches = BatchWriter(layout)
        self.on_writer_failure = on_writer_failure
        self.settle_delay = settle_delay
        self._retention = Retention(self._batches, retention_days, self.call_in_writer)
        self.writer_failure: str | None = None  # why the writer task died, if it did
        self.records: Records | None = None  # read side, set while run() is active
        self._queue = ItemQueue(queue_max, queue_max_bytes)
        self._done = 0  # the last sequence number handled: flush() waits until it catches up
        # A batch of the writer task's not yet counted in _done (the thread is idle before the task
        # resumes): the loop must not commit then, or the batch's late count moves _done back.
        self._batch_out = False
        self._waiters = Waiters()
        # Answers whose linked files are still to be read: queued after their batch's commit.
        self._enrich: deque[Enrichment] = deque()
        self._enrich_queued = 0
        self._enrich_done = 0
        self._answers_waited = 0  # write_ahead() fell back to a commit (stats)
        self._wake = asyncio.Event()
        self._commit_timer = CommitTimer(self._commit_or_wake)
        self._writer_task: asyncio.Task[None] | None = None
        self._thread = WriterThread()
        self._ahead = ahead.AheadLog(ahead.path_for(self.db_path))

    # ---------------------------------------------------------------- enqueue (proxy hot path)

    def _put(self, kind: str, key: str, data: tuple[Any, ...], size: int) -> int:
        try:
            seq = self._queue.put(kind, key, data, size)
            self._wake_soon()
        except Exception:  # the proxy path must never see a recording problem
            log.exception("recorder: enqueue failed")
            return 0
        return seq

    def answer_read(self, seq: int, read: Extracted) -> None:
        """What the proxy read of the answer queued as ``seq`` (``response``'s return) once it had
        left: its row is written from it, unless the writer has the item already."""
        self._queue.attach(seq, read)

    def stats(self) -> RecordStats:
        """The counters now. Read on the loop while the writer thread may be mid-batch: each is
        right on its own, a batch's rows and its failure may land in different readings."""
        return RecordStats.of(
            self._queue, self._batches, linked_reads=self._enrich_queued, answers_waited=self._answers_waited
        )

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
            await self._replay_ahead()
            with self._ahead.opened():
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
                            self._commit_timer.cancel()
                            await asyncio.gather(self._writer_task, pruner, return_exceptions=True)
                            self._writer_task = None
                            self.records = None
                        if self._queue:
                            log.warning("recorder: %d item(s) not written at shutdown", len(self._queue))

    async def flush(self) -> bool:
        """Wait until everything enqueued before this call and not yet handled is handled,
        including the snapshots, console lines and files the answers linked (what readers of
        the record and whoever clears a worker's output dir need).

        True when all of it was committed. False when any of it failed or was dropped (it is
        counted and logged already), or when the writer is not running (returns at once then).
        Never raises: a caller that answers a client after it should log and answer anyway.
        """
        return await self.flush_rows(linked=True)

    async def write_ahead(self) -> bool:
        """What a tool answer waits for: everything enqueued so far is durable, in the write-ahead
        file or committed (``flush_rows``, counted, when the file cannot take it: a backlog past
        its share, a drop, the file given up). ``settle()`` commits it once the answer left."""
        if self.ahead_now():
            return True
        if self.writer_alive:
            self._answers_waited += 1
        return await self.flush_rows()

    def ahead_now(self) -> bool:
        """``write_ahead`` when it need not wait: True once everything enqueued is durable (the
        write-ahead file took what SQLite has not got); False when the caller must await it."""
        if self._done >= self._queue.enqueued:
            return True
        return self.writer_alive and self._ahead.cover(self._queue, self._done)

    def settle(self) -> None:
        """Commits what the write-ahead file holds, after the answer that waited for it left,
        within ``settle_delay`` (answers in that time share the commit; at once from INLINE_MAX
        queued items): on the loop while the writer thread is idle, else by the thread. Never
        raises (its caller is finishing a client's request)."""
        try:
            if self._done >= self._ahead.upto:
                return
            if self.settle_delay <= 0 or len(self._queue) >= INLINE_MAX:
                self._commit_or_wake()
            else:
                self._commit_timer.within(self.settle_delay)
        except Exception:
            log.exception("recorder: commit after an answer failed")

    async def flush_rows(self, *, linked: bool = False) -> bool:
        """``flush`` without waiting for the linked files unless ``linked``: the rows committed."""
        target = self._queue.enqueued
        ok = True
        if self._done < target:
            if not self.writer_alive:
                return False
            start = self._done
            if self._may_commit_inline:
                lost = self._write_inline()
                ok = not any(start < seq <= target for seq in lost)
            if self._done < target:
                self._wake.set()
                ok = await self._waiters.rows(self._done, target)
            elif not self.writer_alive:
                return False
        if linked and self._enrich_done < self._enrich_queued and self.writer_alive:
            self._wake.set()
            await self._waiters.linked(self._enrich_queued)
        return ok

    def _wake_soon(self) -> None:
        """Wakes the writer after WRITE_DELAY_S, or now when the queue is past what the loop
        would commit itself (a backlog: batch it on the thread)."""
        if self._wake.is_set():
            return
        if self._queue.items > INLINE_MAX:
            self._wake.set()
        else:
            self._commit_timer.within(WRITE_DELAY_S)

    def _commit_or_wake(self) -> None:
        """What is queued, committed on the loop while the writer thread is idle (a hop to it
        costs more than the commit), else by the thread."""
        if self.writer_alive and self._may_commit_inline:
            self._write_inline()
        if self._queue:
            self._wake.set()

    @property
    def _may_commit_inline(self) -> bool:
        return self._thread.idle and not self._batch_out and len(self._queue) <= INLINE_MAX

    def _write_inline(self) -> Sequence[int]:
        """The queue's batch, committed on the loop (the writer thread is idle and stays so);
        returns the seqs lost."""
        conn = self._thread.conn
        if conn is None or not self._queue:
            return []
        try:
            if not self._batches.begin_now(conn):
                return []  # another connection is writing: the thread waits for it, not the loop
        except sqlite3.Error:
            return []  # the thread's own attempt will count what fails
        batch = self._queue.take(BATCH_MAX)
        try:
            lost: Sequence[int] = self._write_batch(batch, begun=True)
        except Exception as exc:
            rollback(conn)
            lost = [item.seq for item in batch]
            self._done = batch[-1].seq
            self._writer_died(exc)
            return lost
        self._batch_written(batch, lost)
        return lost

    def _batch_written(self, batch: list[Item], lost: Sequence[int]) -> None:
        self._done = batch[-1].seq
        if not self._queue:
            # What the timer was to commit is: left alone, it would commit the next call's
            # request alone, a second commit (and, on the thread, a hop) for that call.
            self._commit_timer.cancel()
        self._ahead.committed(self._done, lost)
        self._waiters.rows_done(self._done, lost)
        jobs = self._batches.take_enrichments()
        if jobs:
            # At once: the answer is on its way, and the next call is best not met mid-read.
            self._enrich.extend(jobs)
            self._enrich_queued += len(jobs)
            self._wake.set()
        if self._batches.checkpoint_due:
            self._wake.set()  # on the thread: a checkpoint may wait for the file

    async def call_in_writer(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the writer thread, serialised with the batches (prune, tests)."""
        return await self._thread.call(fn)

    async def _writer(self) -> None:
        try:
            while True:
                if self._queue:
                    # Into the write-ahead file first (one write()): an answer during the batch
                    # then waits for the file only, where behind a batch the file has not got it
                    # waits for the commit (~60 ms at 20 busy sessions, 13-20 % of answers).
                    self._ahead.cover(self._queue, self._done)
                    batch = self._queue.take(BATCH_MAX)
                    lost: Sequence[int] = [item.seq for item in batch]  # unless the thread says otherwise
                    self._batch_out = True
                    try:
                        lost = await self.call_in_writer(functools.partial(self._write_batch_on, batch=batch))
                    finally:
                        # Even when cancelled here the thread finishes the batch; count it handled.
                        self._batch_out = False
                        self._batch_written(batch, lost)
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

    def _writer_died(self, exc: Exception) -> None:
        """BatchWriter.write handles every database error itself: this is a bug or a broken executor.
        Nothing will be recorded any more; say so rather than limp on."""
        if self.writer_failure is not None:
            return
        self.writer_failure = f"recorder writer died: {exc!r}"
        log.critical("recorder: writer died, nothing is recorded any more", exc_info=exc)
        if self._writer_task is not None and self._writer_task is not asyncio.current_task():
            self._writer_task.cancel()
        self._waiters.release_all(self._done)
        if self.on_writer_failure is not None:
            try:
                self.on_writer_failure(self.writer_failure)
            except Exception:
                log.exception("recorder: on_writer_failure callback failed")

    async def _replay_ahead(self) -> None:
        """What the write-ahead file of a router that died holds and SQLite has not got; a file
        that could not be read or written is set aside for a person, not started over."""
        items = ahead.read(self._ahead.path)
        lost = 0
        if items:
            lost = await self.call_in_writer(functools.partial(self._batches.replay, items=items))
        if items is None or lost:
            self._ahead.set_aside()

    async def prune(self, now: float | None = None) -> list[str]:
        """Deletes what is past the retention now (see retention.py); the session ids deleted."""
        return await self._retention.prune(now)

    # ---------------------------------------------------------------- writer thread

    def _write_batch_on(self, conn: sqlite3.Connection, batch: list[Item]) -> list[int]:
        return self._write_batch(batch)

    def _write_batch(self, batch: list[Item], *, begun: bool = False) -> list[int]:
        """One transaction for the batch (on the writer thread, or on the loop while that thread
        is idle, ``begun`` by BatchWriter.begin_now); the seqs of the items lost."""
        assert self._thread.conn is not None
        return self._batches.write(self._thread.conn, batch, self._queue.dropped, begun=begun)
