"""The record's one log: a tool answer waits for its call's commit on the writer thread, calls
answered while a batch is on that thread share the next commit, rows nobody waits for are
committed in the writer's next batch, another connection's lock holds the writer, never the event
loop, and the WAL is checkpointed by the writer."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

from router.layout import StateLayout
from router.record.batches import CHECKPOINT_EVERY
from router.record.recorder import Recorder
from router.record.snapshots import summarize
from tests.support.recorded import query
from tests.support.wait import async_wait_for

SNAP = "\n".join(f'- button "b{i}" [ref=e{i}]' for i in range(400))
ANSWER = {"content": [{"type": "text", "text": f"### Snapshot\n```yaml\n{SNAP}\n```\n"}]}
HELD_S = 1.0  # another connection's write lock, well inside the busy timeout


def _call(rec: Recorder, ref: str) -> None:
    rec.request(ref, "s", "tools/call", "browser_click", {}, size=10)
    rec.response(ref, status="success", result='{"content":[]}', duration_ms=1.0, output_dir=None)


async def _opened_session(rec: Recorder) -> None:
    rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
    assert await rec.flush()


async def test_an_answer_waits_for_its_calls_commit(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        await _opened_session(rec)
        _call(rec, "r1")
        assert query(db, "SELECT ref_id FROM responses") == []  # queued, not yet committed
        assert await rec.committed()
        # Read at once on a connection of the test's own: on disk, nothing left to wait for.
        assert query(db, "SELECT ref_id FROM requests") == [("r1",)]
        assert query(db, "SELECT ref_id FROM responses") == [("r1",)]


async def test_calls_answered_during_a_batch_share_the_next_commit(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        await _opened_session(rec)
        gate, started = threading.Event(), threading.Event()

        def held(conn: sqlite3.Connection) -> None:  # stands for a batch the thread is busy with
            started.set()
            gate.wait(10)

        job = asyncio.create_task(rec.call_in_writer(held))
        await asyncio.to_thread(started.wait, 5)
        batches = rec.stats().batches
        answers = []
        for i in range(10):
            _call(rec, f"a{i}")
            answers.append(asyncio.create_task(rec.committed()))
        await asyncio.sleep(0)  # the answers are waiting
        assert not any(a.done() for a in answers)
        gate.set()
        await job
        assert await asyncio.wait_for(asyncio.gather(*answers), 10) == [True] * 10
        assert rec.stats().batches - batches == 1
        assert query(db, "SELECT count(*) FROM responses") == [(10,)]


async def test_a_calls_request_shares_its_answers_commit(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        await _opened_session(rec)
        batches = rec.stats().batches
        for i in range(3):
            rec.request(f"c{i}", "s", "tools/call", "browser_click", {}, size=10)
            await asyncio.sleep(0.2)  # the worker at work: the request waits for its answer
            assert query(db, "SELECT count(*) FROM requests") == [(i,)]
            rec.response(f"c{i}", status="success", result="{}", duration_ms=1.0, output_dir=None)
            assert await rec.committed()
        assert rec.stats().batches - batches == 3, "one commit per call, not one per row"
        assert query(db, "SELECT count(*) FROM requests") == [(3,)]


async def test_a_lone_request_is_committed_by_the_writer_without_anyone_waiting(tmp_path: Path) -> None:
    """A call that hangs is in the record soon after it began (within ALONE_WAIT_S: what a crash
    leaves for forensics), written by the writer thread."""
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        await _opened_session(rec)
        conn = await rec.call_in_writer(lambda c: c)
        threads: set[int] = set()
        conn.set_trace_callback(lambda _: threads.add(threading.get_ident()))
        try:
            rec.request("hung", "s", "tools/call", "browser_wait_for", {}, size=10)
            await async_wait_for(lambda: query(db, "SELECT ref_id FROM requests") == [("hung",)], within=5)
        finally:
            conn.set_trace_callback(None)
        assert threads and threading.get_ident() not in threads, "written on the event loop"


async def test_another_connections_lock_holds_the_answer_not_the_event_loop(tmp_path: Path) -> None:
    """Another connection (a shell's transaction, another process) holds the write lock: the
    answer's commit waits for it on the writer thread, within the busy timeout; the loop runs on."""
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        await _opened_session(rec)
        other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        released: list[float] = []

        def release() -> None:
            released.append(time.monotonic())
            other.execute("COMMIT")

        timer = threading.Timer(HELD_S, release)
        timer.start()
        ticks: list[float] = []

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(0.01)  # ticks of the loop, measured: not synchronisation
                ticks.append(time.monotonic())

        beat = asyncio.create_task(heartbeat())
        try:
            _call(rec, "r1")
            sent = time.monotonic()
            assert await rec.committed()
            answered = time.monotonic()
        finally:
            beat.cancel()
            timer.join()
            other.close()
        assert released and answered >= released[0], "the answer left before its commit"
        assert any(sent < t < released[0] for t in ticks), "the event loop was frozen while the lock was held"
        assert query(db, "SELECT count(*) FROM responses WHERE ref_id = 'r1'") == [(1,)]


async def test_a_lock_held_past_the_busy_timeout_fails_the_answers_commit_and_the_next_one_is_kept(
    tmp_path: Path,
) -> None:
    db = tmp_path / "router.db"
    rec = Recorder(db)
    async with rec.run():
        await _opened_session(rec)
        await rec.call_in_writer(lambda c: c.execute("PRAGMA busy_timeout = 50"))
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            _call(rec, "lost")
            assert await asyncio.wait_for(rec.committed(), 10) is False  # the answer leaves, told so
            assert rec.stats().failing
        finally:
            other.execute("ROLLBACK")
            other.close()
        _call(rec, "kept")
        assert await rec.committed()
        assert query(db, "SELECT ref_id FROM responses") == [("kept",)]
        failures = query(db, "SELECT what FROM recorder_failures")
        assert len(failures) == 1 and "batch of" in failures[0][0]


async def test_wal_is_checkpointed_after_many_commits(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "router.db", layout=StateLayout(tmp_path))
    inline = summarize(ANSWER).for_record(None)
    assert inline is not None  # what exchange.py passes: snapshot inline, output_dir=None
    async with rec.run():
        await _opened_session(rec)
        wal = Path(str(tmp_path / "router.db") + "-wal")
        sizes = []
        for round_ in range(2):
            for i in range(CHECKPOINT_EVERY * 3):
                ref = f"r{round_}-{i}"
                rec.request(ref, "s", "tools/call", "browser_snapshot", {}, size=10)
                rec.response(ref, status="success", result=json.dumps(ANSWER), page_snapshot=inline[0],
                             console_logs=inline[1], duration_ms=1.0, output_dir=None)
                assert await rec.committed()
            await rec.flush()
            sizes.append(os.stat(wal).st_size)
        # Checkpointed every CHECKPOINT_EVERY commits, the WAL file stays at its high-water mark;
        # never checkpointed, it grows by tens of MB a round.
        assert sizes[1] < sizes[0] * 1.5, f"WAL never checkpointed: {sizes} bytes after {rec.stats().batches} commits"
