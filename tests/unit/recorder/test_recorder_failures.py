"""The recorder fails loudly: a failed batch or a drop makes flush() say so and is counted; the
queue is bounded in bytes; a dead writer is reported and stops nobody."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from router.record.batches import BatchWriter
from router.record.recorder import Recorder


def _call(rec: Recorder, session_id: str = "s", *, result: str = '{"content":[]}') -> str:
    ref_id = str(uuid.uuid4())
    rec.request(ref_id, session_id, "tools/call", "browser_snapshot", {"name": "browser_snapshot"})
    rec.response(ref_id, status="success", result=result, duration_ms=1.5)
    return ref_id


def _count(db: Path, table: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


async def test_flush_says_false_after_a_failed_batch_and_counts_it(recorder: Recorder) -> None:
    _call(recorder)
    assert await recorder.flush() is True
    assert (recorder.stats().failed_batches, recorder.stats().failed_rows, recorder.stats().failing) == (0, 0, False)
    # query_only makes every write fail like a read-only or full disk would (root ignores chmod).
    await recorder.call_in_writer(lambda c: c.execute("PRAGMA query_only = ON"))
    _call(recorder)
    assert await recorder.flush() is False
    assert (recorder.stats().failed_batches, recorder.stats().failed_rows, recorder.stats().failing) == (1, 2, True)
    await recorder.call_in_writer(lambda c: c.execute("PRAGMA query_only = OFF"))
    _call(recorder)
    assert await recorder.flush() is True  # an earlier failure is not this flush's
    assert recorder.stats().failing is False and recorder.stats().failed_batches == 1


async def test_one_bad_row_makes_the_flush_false(recorder: Recorder) -> None:
    recorder.response("odd", status="maybe", result=None, duration_ms=0)  # violates the CHECK
    _call(recorder)
    assert await recorder.flush() is False
    assert recorder.stats().failed_batches == 1 and recorder.stats().failed_rows == 1


async def test_the_queue_is_bounded_in_bytes_and_a_drop_makes_the_flush_false(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mib = "x" * (1024 * 1024)
    rec = Recorder(db_path, queue_max_bytes=4 * 1024 * 1024)
    with caplog.at_level(logging.ERROR, logger="router.record.recorder"):
        for _ in range(6):  # the writer is not running yet: nothing drains
            _call(rec, result=mib)
    assert rec.stats().queue_bytes <= 4 * 1024 * 1024
    assert rec.stats().dropped == 3  # three responses of 1 MiB fit; the rest and nothing else refused
    assert rec.stats().queue_len == 9
    dropped_lines = [r for r in caplog.records if "queue full" in r.getMessage()]
    assert len(dropped_lines) == 1  # logged once per interval, not once per item
    async with rec.run():
        assert await rec.flush() is False
        assert rec.stats().queue_bytes == 0 and rec.stats().queue_len == 0
        assert _count(db_path, "responses") == 3
        _call(rec)
        assert await rec.flush() is True


async def test_a_huge_params_value_counts_by_its_size(db_path: Path) -> None:
    rec = Recorder(db_path, queue_max_bytes=1024 * 1024)
    rec.request("r1", "s", "tools/call", "t", {"arguments": {"text": "y" * (2 * 1024 * 1024)}})
    rec.request("r2", "s", "tools/call", "t", [[i] for i in range(20_000)])  # deep: measured by encoding
    rec.request("r3", "s", "tools/call", "t", None, size=2 * 1024 * 1024)
    assert rec.stats().dropped == 2 and rec.stats().queue_len == 1


async def test_a_dead_writer_is_reported_and_flush_returns_false(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reasons: list[str] = []
    rec = Recorder(db_path, on_writer_failure=reasons.append)

    def broken(*_: Any, **__: Any) -> list[int]:
        raise RuntimeError("injected")

    async with rec.run():
        assert rec.writer_alive
        monkeypatch.setattr(BatchWriter, "write", broken)
        _call(rec)
        assert await rec.flush() is False
        assert not rec.writer_alive
        assert len(reasons) == 1 and "injected" in reasons[0]
        assert rec.writer_failure == reasons[0]
        _call(rec)  # the proxy path still never raises
        assert await rec.flush() is False
