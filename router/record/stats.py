"""What the record has done since start, read in one call: for /metrics and /healthz."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.record.batches import BatchWriter
    from router.record.queue import ItemQueue


@dataclass(frozen=True, slots=True)
class RecordStats:
    queue_len: int  # items waiting for the writer
    queue_bytes: int  # bytes of params and results among them
    dropped: int  # items refused because the queue was full
    written: int  # items committed
    batches: int  # committed batch transactions
    failed_batches: int  # batches of which at least one item could not be written
    failed_rows: int  # items that reached the writer and could not be written
    linked_reads: int  # answers whose linked files were read (or kept) after their row, on the writer thread
    failing: bool  # the last batch lost items (full or read-only disk...): the record is not keeping up

    @classmethod
    def of(cls, queue: ItemQueue, batches: BatchWriter, *, linked_reads: int) -> RecordStats:
        return cls(
            queue_len=queue.items,
            queue_bytes=queue.bytes,
            dropped=queue.dropped,
            written=batches.written,
            batches=batches.batches,
            failed_batches=batches.failed_batches,
            failed_rows=batches.failures,
            linked_reads=linked_reads,
            failing=batches.last_failed,
        )
