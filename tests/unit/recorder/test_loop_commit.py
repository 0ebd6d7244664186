"""The record's commits on the event loop beside its writer thread: the loop never waits on
another connection's lock, never commits while a job runs on the thread (even one whose awaiter was
cancelled) nor before the writer task has counted the batch the thread just wrote, and the WAL is
checkpointed wherever the commits were made. What the loop's commit costs: no PRAGMA, one commit
for a call slower than a click, and a lone request written by the loop, not by a hop to the thread."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from router.layout import StateLayout
from router.record import recorder as recorder_module
from router.record import schema
from router.record.batches import CHECKPOINT_EVERY
from router.record.recorder import Recorder
from router.record.snapshots import summarize

SNAP = "\n".join(f'- button "b{i}" [ref=e{i}]' for i in range(400))
ANSWER = {"content": [{"type": "text", "text": f"### Snapshot\n```yaml\n{SNAP}\n```\n"}]}


def _call(rec: Recorder, ref: str) -> None:
    rec.request(ref, "s", "tools/call", "browser_click", {}, size=10)
    rec.response(ref, status="success", result='{"content":[]}', duration_ms=1.0, output_dir=None)


async def test_inline_commit_does_not_wait_on_the_loop_for_another_writer(tmp_path: Path) -> None:
    """Another connection (the read side's diff cursor, another process) holds the write lock: the
    answer's commit goes to the writer thread, which waits for it; the loop runs on meanwhile."""
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        await rec.flush()
        other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        released: list[float] = []

        def release() -> None:
            released.append(time.monotonic())
            other.execute("COMMIT")

        threading.Timer(1.0, release).start()
        ticks: list[float] = []

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(0.01)
                ticks.append(time.monotonic())

        beat = asyncio.create_task(heartbeat())
        _call(rec, "r1")
        sent = time.monotonic()
        assert await rec.flush_rows()  # committed once the lock was free, by the thread
        beat.cancel()
        other.close()
        assert released, "the commit did not wait for the other writer"
        assert any(sent < t < released[0] for t in ticks), "the event loop was frozen while the lock was held"
        rows = sqlite3.connect(db).execute("SELECT count(*) FROM responses WHERE ref_id = 'r1'").fetchone()
        assert rows == (1,)


async def test_a_cancelled_writer_job_keeps_the_loop_from_committing_beside_it(tmp_path: Path) -> None:
    """A job whose awaiter was cancelled (a prune at shutdown) still runs on the thread: until it
    ends, an answer's commit is the thread's too, never the loop's inside the job's transaction."""
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        await rec.flush()
        started = threading.Event()

        def slow_job(conn: sqlite3.Connection) -> None:  # stands for BatchWriter.prune
            conn.execute("BEGIN IMMEDIATE")
            started.set()
            time.sleep(0.5)
            conn.execute("COMMIT")

        job = asyncio.create_task(rec.call_in_writer(slow_job))
        await asyncio.to_thread(started.wait, 5)
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
        _call(rec, "r2")
        assert await rec.flush_rows(), "the loop's commit collided with the thread's transaction"
        rows = sqlite3.connect(db).execute("SELECT count(*) FROM responses WHERE ref_id = 'r2'").fetchone()
        assert rows == (1,)


async def test_wal_is_checkpointed_after_many_inline_answers(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "router.db", layout=StateLayout(tmp_path))
    facts = summarize(ANSWER)
    inline = facts.for_record(None)
    assert inline is not None  # what exchange.py passes: snapshot inline, output_dir=None
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        wal = Path(str(tmp_path / "router.db") + "-wal")
        sizes = []
        for round_ in range(2):
            for i in range(CHECKPOINT_EVERY * 3):
                ref = f"r{round_}-{i}"
                rec.request(ref, "s", "tools/call", "browser_snapshot", {}, size=10)
                rec.response(ref, status="success", result=json.dumps(ANSWER), page_snapshot=inline[0],
                             console_logs=inline[1], duration_ms=1.0, output_dir=None)
                assert await rec.flush_rows()
                await asyncio.sleep(0)
            await rec.flush()
            sizes.append(os.stat(wal).st_size)
        # Checkpointed every CHECKPOINT_EVERY commits, the WAL file stays at its high-water mark
        # (~9 MB here); never checkpointed, it grew by ~39 MB a round.
        assert sizes[1] < sizes[0] * 1.5, f"WAL never checkpointed: {sizes} bytes after {rec.stats().batches} commits"


async def test_a_commit_on_the_loop_right_after_a_thread_batch_keeps_the_flush_promise(tmp_path: Path) -> None:
    """The thread's batch is done (the thread is idle) but the writer task has not yet counted it:
    an answer's flush in that gap commits the next items on the loop. The writer's late count of
    its own batch must not move what flush() knows to be written back behind them, or the next
    reader's flush (the operator API's GET /api/sessions/{id}) waits for rows already on disk,
    until something else is recorded (the CI flake: a ReadTimeout on an idle session)."""
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        await rec.flush()
        gate, started = threading.Event(), threading.Event()

        def held(conn: sqlite3.Connection) -> None:  # keeps the thread busy while we queue behind it
            started.set()
            gate.wait(10)

        job = asyncio.create_task(rec.call_in_writer(held))
        await asyncio.to_thread(started.wait, 5)
        for i in range(5):  # past INLINE_MAX: the writer takes them to the thread at once
            _call(rec, f"a{i}")
        for _ in range(100):  # loop iterations, not time: the writer task was woken at once
            if not rec.stats().queue_len:
                break
            await asyncio.sleep(0)
        assert rec.stats().queue_len == 0, "the writer did not take the batch"
        _call(rec, "b")  # the next answer, queued while the thread works
        flushes: list[asyncio.Task[bool]] = []

        async def busy_neighbour() -> None:
            # Other requests on the loop: each iteration one of them may be an answer's flush,
            # until the answer queued behind the thread's batch is written.
            while rec.stats().queue_len:
                flushes.append(asyncio.create_task(rec.flush_rows()))
                await asyncio.sleep(0)

        neighbour = asyncio.create_task(busy_neighbour())
        gate.set()
        await job
        await asyncio.wait_for(neighbour, 10)
        assert flushes and all(await asyncio.wait_for(asyncio.gather(*flushes), 10))
        records = rec.records
        assert records is not None
        # Nothing new is queued: every row is on disk, so the read side's flush returns at once.
        session = await asyncio.wait_for(records.get_session("s"), 5)
        assert session["id"] == "s"
        rows = sqlite3.connect(db).execute("SELECT count(*) FROM responses").fetchone()
        assert rows == (6,)


async def test_an_answers_commit_on_the_loop_runs_no_pragma(tmp_path: Path) -> None:
    """The loop's commit is on every tool answer's path: its connection's settings (a busy_timeout
    of 0 for the loop, which must not wait) are set once, not around each commit. The writer
    thread's jobs still wait for another writer (see the first test)."""
    rec = Recorder(tmp_path / "router.db")
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        await rec.flush()
        conn = await rec.call_in_writer(lambda c: c)
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        try:
            for i in range(3):
                _call(rec, f"r{i}")
                assert await rec.flush_rows()
        finally:
            conn.set_trace_callback(None)
        assert statements, "nothing was committed on the loop"
        assert not [s for s in statements if s.upper().startswith("PRAGMA")], statements
        assert await rec.call_in_writer(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0]) == (
            schema.BUSY_TIMEOUT_MS
        )


async def test_a_call_slower_than_a_click_settles_is_still_one_commit(tmp_path: Path) -> None:
    """A click takes ~0.55 s (the worker waits for the page to settle): its request waits for its
    answer and both go in the commit the answer makes, not one commit each (at a 20-ms delay the
    request went alone, through a hop to the writer thread)."""
    rec = Recorder(tmp_path / "router.db")
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        await rec.flush()
        commits = []
        for i in range(3):
            before = rec.stats().batches
            rec.request(f"r{i}", "s", "tools/call", "browser_click", {}, size=10)
            await asyncio.sleep(0.1)  # the worker's time on the call, not synchronisation
            rec.response(f"r{i}", status="success", result="{}", duration_ms=100.0, output_dir=None)
            assert await rec.flush_rows()
            commits.append(rec.stats().batches - before)
        # The first call meets the writer task's first turn, which writes whatever is queued.
        assert commits[1:] == [1, 1], commits


async def test_a_request_left_waiting_is_written_on_the_loop_after_the_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that hangs is in the record WRITE_DELAY_S after it began (what a crash leaves for
    forensics), written on the event loop while the writer thread is idle: no hop to it."""
    monkeypatch.setattr(recorder_module, "WRITE_DELAY_S", 0.05)
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        await rec.flush()
        conn = await rec.call_in_writer(lambda c: c)
        threads: set[int] = set()
        conn.set_trace_callback(lambda _: threads.add(threading.get_ident()))
        rec.request("hung", "s", "tools/call", "browser_wait_for", {}, size=10)
        reader = sqlite3.connect(db)
        try:
            deadline = time.monotonic() + 5
            while not reader.execute("SELECT count(*) FROM requests WHERE ref_id = 'hung'").fetchone()[0]:
                assert time.monotonic() < deadline, "the lone request was never written"
                await asyncio.sleep(0.01)
        finally:
            reader.close()
            conn.set_trace_callback(None)
        assert threads == {threading.get_ident()}, "written on the writer thread"
