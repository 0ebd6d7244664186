"""The write-ahead file (router/record/ahead.py): a tool answer waits for one write() of its
rows, the commit follows once the answer has left, and a router killed in between replays the
file when it next starts, once."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from router.record import ahead
from router.record import recorder as recorder_module
from router.record.commit_timer import SETTLE_DELAY_S
from router.record.recorder import INLINE_MAX, Recorder
from router.record.rows import Item
from tests.support import run_cli
from tests.support.recorded import query
from tests.support.wait import async_wait_for

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("ahead_child.py")


def _call(rec: Recorder, ref: str) -> None:
    rec.request(ref, "s", "tools/call", "browser_tabs", {"name": "browser_tabs"}, size=10)
    rec.response(ref, status="success", result='{"content":[]}', duration_ms=1.0)


@asynccontextmanager
async def _opened(db: Path, settle_delay: float = SETTLE_DELAY_S) -> AsyncIterator[Recorder]:
    """A running recorder with its session's row committed."""
    rec = Recorder(db, settle_delay=settle_delay)
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        assert await rec.flush()
        yield rec


async def test_an_answer_waits_for_the_file_and_the_commit_follows_it(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    async with _opened(db, settle_delay=0) as rec:
        batches = rec.stats().batches
        _call(rec, "r1")
        assert await rec.write_ahead()
        # Durable in the file, not committed yet: the answer did not wait for SQLite.
        assert ahead.path_for(db).stat().st_size > 0
        assert query(db, "SELECT ref_id FROM responses") == []
        assert rec.stats().batches == batches
        rec.settle()  # the exchange, once the answer has left
        assert query(db, "SELECT ref_id FROM responses") == [("r1",)]
        assert rec.stats().batches == batches + 1  # request and answer in one commit, on the loop
        assert ahead.path_for(db).stat().st_size == 0  # all it held is committed


async def test_answers_close_together_share_one_commit(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    async with _opened(db, settle_delay=0.2) as rec:
        batches = rec.stats().batches
        for ref in ("r1", "r2"):
            _call(rec, ref)
            assert await rec.write_ahead()
            rec.settle()
        # Both answers left; neither waited for a commit, and none was made yet.
        assert query(db, "SELECT ref_id FROM responses") == []
        await async_wait_for(lambda: len(query(db, "SELECT ref_id FROM responses")) == 2)
        assert rec.stats().batches == batches + 1
        assert ahead.path_for(db).stat().st_size == 0


async def test_a_full_group_is_committed_at_once(tmp_path: Path) -> None:
    """Past INLINE_MAX queued items the commit after an answer does not wait for more."""
    db = tmp_path / "router.db"
    async with _opened(db, settle_delay=60) as rec:
        refs = [f"r{n}" for n in range(INLINE_MAX // 2)]  # a request and an answer each
        for ref in refs:
            _call(rec, ref)
            assert await rec.write_ahead()
            rec.settle()
        assert sorted(query(db, "SELECT ref_id FROM responses")) == [(ref,) for ref in sorted(refs)]
        assert ahead.path_for(db).stat().st_size == 0


def test_a_router_killed_before_the_commit_replays_the_file_once(tmp_path: Path) -> None:
    db, out = tmp_path / "router.db", tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(CHILD), str(db), str(out)], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.strip() == "answered"
    # The answer left with its call only in the write-ahead file.
    assert query(db, "SELECT ref_id FROM responses") == [("c0",)]
    kept = tmp_path / "kept.ahead"
    shutil.copy(ahead.path_for(db), kept)
    assert kept.stat().st_size > 0

    async def start_and_stop() -> None:
        async with Recorder(db).run():
            pass

    asyncio.run(start_and_stop())
    assert query(db, "SELECT ref_id FROM requests ORDER BY ts") == [("c0",), ("c1",)]
    assert query(db, "SELECT ref_id, page_snapshot IS NOT NULL, duration_ms FROM responses ORDER BY ts") == [
        ("c0", 1, 1.0), ("c1", 1, 2.0)
    ]
    assert query(db, "SELECT level, message FROM console_logs WHERE ref_id = 'c1'") == [("error", "boom")]
    assert query(db, "SELECT detail FROM session_events") == [("idle",)]
    assert ahead.path_for(db).stat().st_size == 0

    # A file whose rows are all in SQLite already (killed after the commit, before the emptying).
    shutil.copy(kept, ahead.path_for(db))
    asyncio.run(start_and_stop())
    assert query(db, "SELECT count(*) FROM responses") == [(2,)]
    assert query(db, "SELECT count(*) FROM session_events") == [(1,)]
    assert query(db, "SELECT count(*) FROM recorder_failures") == [(0,)]


def test_a_torn_last_frame_ends_the_replay_and_keeps_what_came_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = ahead.AheadLog(tmp_path / "router.db.ahead")
    first = Item("response", 1.5, "r1", ("success", "{}", None, None, None, 1.0, tmp_path, None), 7, 0)
    second = Item("request", 2.5, "r2", ("s", "tools/call", "browser_tabs", {"a": [1, None]}), 8, 0)
    with log.opened():
        assert log.append([first]) and log.append([second])
    assert ahead.read(log.path) == [first, second]  # paths come back as paths
    with log.path.open("ab") as f:
        f.write(ahead.HEADER.pack(1000, 0) + b"half a frame")  # the process died mid-write()
    assert ahead.read(log.path) == [first, second]
    assert "torn write" in caplog.text


@asynccontextmanager
async def _thread_held(rec: Recorder, calls: int) -> AsyncIterator[threading.Event]:
    """``calls`` calls queued past INLINE_MAX and taken by the writer task for its thread, which
    is held (the returned gate lets it go) so that the batch stays out."""
    gate, started = threading.Event(), threading.Event()

    def held(conn: sqlite3.Connection) -> None:
        started.set()
        gate.wait(10)

    job = asyncio.create_task(rec.call_in_writer(held))
    await asyncio.to_thread(started.wait, 5)
    for i in range(calls):  # past INLINE_MAX: the writer task takes them for the thread at once
        _call(rec, f"a{i}")
    for _ in range(100):
        if not rec.stats().queue_len:
            break
        await asyncio.sleep(0)
    assert rec.stats().queue_len == 0, "the writer did not take the batch"
    try:
        yield gate
    finally:
        gate.set()
        await job


async def test_a_batch_the_thread_takes_is_written_ahead_first_so_an_answer_during_it_does_not_wait(
    tmp_path: Path,
) -> None:
    db = tmp_path / "router.db"
    async with _opened(db, settle_delay=0.1) as rec:
        async with _thread_held(rec, 5):
            _call(rec, "b")
            assert await asyncio.wait_for(rec.write_ahead(), 5)  # with the batch still on the thread
            assert query(db, "SELECT count(*) FROM requests") == [(0,)]
            assert rec.stats().answers_waited == 0
        assert await rec.flush()
        assert query(db, "SELECT count(*) FROM requests") == [(6,)]


async def test_rows_a_backlog_holds_past_the_files_share_are_waited_for(tmp_path: Path) -> None:
    """Past AHEAD_MAX items the writer's batch is not written ahead: an answer behind it waits
    for its commit, as before the file, and is counted."""
    db = tmp_path / "router.db"
    async with _opened(db, settle_delay=0.1) as rec:
        async with _thread_held(rec, ahead.AHEAD_MAX // 2 + 1) as gate:
            _call(rec, "b")
            answer = asyncio.create_task(rec.write_ahead())
            for _ in range(20):
                await asyncio.sleep(0)
            assert not answer.done(), "the answer left before rows it follows were durable"
            assert rec.stats().answers_waited == 1
            gate.set()
            assert await asyncio.wait_for(answer, 10)
        assert query(db, "SELECT count(*) FROM requests") == [(ahead.AHEAD_MAX // 2 + 2,)]


async def test_a_commit_that_lost_rows_the_file_holds_keeps_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another connection holds the write lock past the busy timeout: the answer has left already
    (the file holds its call), the commit fails, and the file stays for the next start."""
    db = tmp_path / "router.db"
    async with _opened(db) as rec:
        await rec.call_in_writer(lambda c: c.execute("PRAGMA busy_timeout = 50"))
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            _call(rec, "r1")
            assert await rec.write_ahead()  # not held up by the lock
            rec.settle()  # the loop does not wait for the lock: the thread does, and gives up
            assert not await rec.flush_rows()
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert "kept for the next start" in caplog.text
        assert ahead.path_for(db).stat().st_size > 0
    # The next start (here: the same file, a new recorder) writes what the lost commit held.
    async with Recorder(db).run():
        pass
    assert query(db, "SELECT ref_id FROM responses") == [("r1",)]


def _ahead_file(db: Path, items: list[Item]) -> None:
    """A write-ahead file as a router that died left it."""
    log = ahead.AheadLog(ahead.path_for(db))
    with log.opened():
        assert log.append(items)


async def _record_one_call(db: Path) -> None:
    rec = Recorder(db)
    async with rec.run():
        rec.session_opened("s", client_info={}, protocol_version=None, port=1, pid=1)
        _call(rec, "c1")
        assert await rec.flush()


async def test_a_replay_redoes_a_sessions_updates_after_its_last_recorded_call(tmp_path: Path) -> None:
    """Commits follow the items' order: a session's update written ahead after the last call
    SQLite has (another call's answer carried it into the file) is replayed; one before it was
    committed with that call and is not replayed over what came after."""
    db = tmp_path / "router.db"
    await _record_one_call(db)
    _ahead_file(db, [
        Item("open", 1.0, "s", ({}, None, 99, 99, None, None), 10, 0),  # committed with c1: skipped
        Item("request", 1.0, "c1", ("s", "tools/call", "browser_tabs", {}), 11, 0),
        Item("response", 1.0, "c1", ("success", "{}", None, None, None, 1.0, None, None), 12, 0),
        Item("state", 2.0, "s", ("closed",), 13, 0),  # after it: replayed
    ])
    async with Recorder(db).run():
        pass
    assert query(db, "SELECT state, worker_port FROM sessions") == [("closed", 1)]
    assert query(db, "SELECT count(*) FROM responses") == [(1,)]


async def test_a_replay_that_cannot_write_a_row_sets_the_file_aside(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    await _record_one_call(db)
    good = Item("request", 3.0, "c2", ("s", "tools/call", "browser_tabs", {}), 20, 0)
    bad = Item("response", 3.0, "c2", ("neither success nor error", "{}", None, None, None, 1.0, None, None), 21, 0)
    _ahead_file(db, [good, bad])
    async with Recorder(db).run():
        pass
    assert query(db, "SELECT ref_id FROM requests ORDER BY ref_id") == [("c1",), ("c2",)]  # the others are kept
    aside = ahead.set_aside_files(db)
    assert len(aside) == 1 and ahead.read(aside[0]) == [good, bad]  # for a person, not started over
    assert ahead.path_for(db).stat().st_size == 0


async def test_a_full_disk_gives_the_file_up_and_answers_wait_for_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    db = tmp_path / "router.db"
    async with _opened(db) as rec:
        monkeypatch.setattr(ahead.os, "write", full)
        for ref in ("r1", "r2"):
            _call(rec, ref)
            assert await rec.write_ahead()  # committed instead
            assert query(db, "SELECT count(*) FROM responses WHERE ref_id = ?", (ref,)) == [(1,)]
    assert caplog.text.count("write-ahead file given up") == 1


async def test_the_cli_says_when_answered_calls_wait_in_the_file(tmp_path: Path) -> None:
    """Read while the router is down, the record lacks what the file holds: `mcp-router show`
    says so rather than show a timeline that silently ends early."""
    db = tmp_path / "router.db"
    await _record_one_call(db)
    _ahead_file(db, [Item("request", 3.0, "c2", ("s", "tools/call", "browser_tabs", {}), 20, 0)])
    shown = await asyncio.to_thread(run_cli, "show", "s", "--state-dir", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "router.db.ahead holds answered calls not yet in router.db" in shown.stderr
    assert "c1" in shown.stdout or "browser_tabs" in shown.stdout


async def test_a_batch_that_empties_the_queue_calls_off_the_answers_commit_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer's 0.1-s commit, made early by a thread batch, must not fire later and commit the
    next call's lone request by itself (a second commit for that call)."""
    monkeypatch.setattr(recorder_module, "WRITE_DELAY_S", 30.0)
    db = tmp_path / "router.db"
    async with _opened(db, settle_delay=0.1) as rec:
        _call(rec, "r1")
        assert await rec.write_ahead()
        rec.settle()  # the 0.1-s timer
        for i in range(INLINE_MAX // 2):  # past INLINE_MAX: the thread commits everything
            _call(rec, f"a{i}")
        await async_wait_for(lambda: rec.stats().queue_len == 0 and len(query(db, "SELECT 1 FROM responses")) == 5)
        batches = rec.stats().batches
        rec.request("lone", "s", "tools/call", "browser_click", {"name": "browser_click"}, size=10)
        await asyncio.sleep(0.3)  # past the answer's 0.1 s; the request itself waits 30 s for its answer
        assert rec.stats().batches == batches
        assert query(db, "SELECT ref_id FROM requests WHERE ref_id = 'lone'") == []
