"""Transactions of the record: a batch of queued items, then what their answers linked.

One ``BatchWriter`` per recorder; it runs on the recorder's writer thread.

A batch is one transaction. A database error that would fail every row (disk full, read-only) is
counted once for the batch; a bad row is isolated and the others are kept. Failures wait in
memory for the next transaction that can write them to ``recorder_failures``.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import deque
from collections.abc import Sequence
from typing import Final

from router.layout import StateLayout
from router.record import files, schema
from router.record.rows import Enrichment, Item, RowWriter, scrubbed

log = logging.getLogger("router.record.recorder")

MAX_PENDING_FAILURES: Final = 100
# SQLite's own checkpoint runs inside whichever commit crosses its threshold, which may be the one a
# tool answer waits for: it is off, and the writer checkpoints after this many commits instead,
# once its queue is empty (the answers that waited for the last commit have left).
CHECKPOINT_EVERY: Final = 200


class BatchWriter:
    def __init__(self, layout: StateLayout | None) -> None:
        self.layout = layout
        self.rows = RowWriter(layout, self.note_failure)
        self.written = 0  # items written
        self.batches = 0  # committed batch transactions
        self.failures = 0  # items that reached the writer but could not be written
        self.failed_batches = 0  # batches of which at least one item was not written
        self.last_failed = False
        self._commits = 0
        self._enrichments: list[Enrichment] = []  # from the last batch, for the recorder to queue
        self._pending_failures: deque[tuple[float, str, str]] = deque(maxlen=MAX_PENDING_FAILURES)

    def take_enrichments(self) -> list[Enrichment]:
        jobs, self._enrichments = self._enrichments, []
        return jobs

    def note_failure(self, what: str, error: str) -> None:
        self._pending_failures.append((time.time(), what, error))

    def write(self, conn: sqlite3.Connection, batch: Sequence[Item], dropped_total: int) -> list[int]:
        """One transaction for the batch; returns the seqs of the items lost (drop markers
        included). Never raises: a failure is counted, logged and kept for recorder_failures."""
        lost = [item.seq for item in batch if item.kind == "dropped"]
        for item in batch:
            if item.kind == "dropped":
                self.note_failure("queue full", f"{item.data[0]} item(s) dropped (total {dropped_total})")
        items = [item for item in batch if item.kind != "dropped"]
        jobs: list[Enrichment] = []
        try:
            conn.execute("BEGIN")
            for item in items:
                if (job := self.rows.apply(conn, item)) is not None:
                    jobs.append(job)
            self._flush_failures(conn)
            self._commit(conn)
            self.written += len(items)
            self.batches += 1
            self._pending_failures.clear()
            self._enrichments += jobs
            self._batch_done(failed=False)
            return lost
        except sqlite3.OperationalError as exc:
            # Disk full, read-only, locked past busy_timeout: retrying row by row would fail the
            # same way, so the whole batch is counted once.
            self._rollback(conn)
            self.failures += len(items)
            self.note_failure(f"batch of {len(items)}", repr(exc))
            log.error("recorder: batch of %d not written: %s", len(items), exc)
            self._batch_done(failed=True)
            return [item.seq for item in batch]
        except Exception:
            self._rollback(conn)
        # Some row is bad (duplicate ref_id, bad status...): isolate it, keep the others.
        for item in items:
            try:
                try:
                    job = self._apply_alone(conn, item)
                except UnicodeEncodeError:  # a lone surrogate: kept written out rather than lost
                    job = self._apply_alone(conn, scrubbed(item))
                self.written += 1
                if job is not None:
                    self._enrichments.append(job)
            except Exception as exc:
                self.failures += 1
                lost.append(item.seq)
                self.note_failure(f"{item.kind} {item.key}", repr(exc))
                log.error("recorder: %s %s not written: %s", item.kind, item.key, exc)
        self._write_failures(conn)
        self._batch_done(failed=bool(lost))
        return lost

    def _apply_alone(self, conn: sqlite3.Connection, item: Item) -> Enrichment | None:
        """One item in a transaction of its own; rolled back when it raises."""
        try:
            conn.execute("BEGIN")
            job = self.rows.apply(conn, item)
            self._commit(conn)
        except BaseException:
            self._rollback(conn)
            raise
        return job

    def enrich(self, conn: sqlite3.Connection, jobs: Sequence[Enrichment]) -> None:
        """Reads what the answers linked onto their rows (writer thread only: it reads files).
        A job that fails costs only what it would have added; the row stays."""
        conn.execute("BEGIN")
        try:
            for job in jobs:
                conn.execute("SAVEPOINT job")
                try:
                    self.rows.enrich(conn, job)
                    conn.execute("RELEASE job")
                except Exception as exc:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    self.note_failure(f"linked files {job.ref_id}", repr(exc))
            self._flush_failures(conn)
            self._commit(conn)
            self._pending_failures.clear()
        except Exception as exc:
            rollback(conn)
            self.note_failure(f"linked files of {len(jobs)} answer(s)", repr(exc))
            log.error("recorder: linked files of %d answer(s) not read: %s", len(jobs), exc)

    @property
    def checkpoint_due(self) -> bool:
        return self._commits >= CHECKPOINT_EVERY

    def checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copies the WAL back into the database so the WAL starts over (writer thread: it may
        wait for the file). PASSIVE: never waits for readers; what they hold is copied next time."""
        self._commits = 0
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            log.warning("recorder: checkpoint failed: %s", exc)

    def prune(self, conn: sqlite3.Connection, cutoff: float) -> list[str]:
        """Deletes the record (and kept files) older than ``cutoff``; the session ids deleted."""
        refs = schema.prune_files(conn, cutoff)
        if self.layout is not None:
            files.remove(self.layout.files_dir(ref) for ref in refs)
        return schema.prune(conn, cutoff)

    def _commit(self, conn: sqlite3.Connection) -> None:
        conn.execute("COMMIT")
        self._commits += 1

    def _rollback(self, conn: sqlite3.Connection) -> None:
        rollback(conn)
        self.rows.forget_activity()

    def _batch_done(self, *, failed: bool) -> None:
        # Written on the writer thread, read by the loop: plain int/bool stores, no torn values.
        if failed:
            self.failed_batches += 1
        self.last_failed = failed

    def _flush_failures(self, conn: sqlite3.Connection) -> None:
        if not self._pending_failures:
            return
        conn.executemany(
            "INSERT INTO recorder_failures (ts, what, error) VALUES (?, ?, ?)", list(self._pending_failures)
        )

    def _write_failures(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("BEGIN")
            self._flush_failures(conn)
            self._commit(conn)
            self._pending_failures.clear()
        except Exception:
            rollback(conn)


def rollback(conn: sqlite3.Connection) -> None:
    """Ends an open transaction unwritten, never raising (the caller is handling a failure)."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass
