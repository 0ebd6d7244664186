"""What a call costs the record's commit: a session's last_activity is moved at most once per
ACTIVITY_EVERY_S by its requests (never further behind than that), and a rolled-back write is
never taken for one that moved it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.record import schema
from router.record.batches import BatchWriter
from router.record.rows import ACTIVITY_EVERY_S, Item


def _request(seq: int, ts: float, session_id: str = "s") -> Item:
    return Item("request", ts, f"r{seq}", (session_id, "tools/call", "browser_tabs", {}), seq, 0)


def _state(seq: int, ts: float, state: str, session_id: str = "s") -> Item:
    return Item("state", ts, session_id, (state,), seq, 0)


def _last_activity(conn: sqlite3.Connection, session_id: str = "s") -> float:
    return float(conn.execute("SELECT last_activity FROM sessions WHERE id = ?", (session_id,)).fetchone()[0])


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    db = schema.connect(tmp_path / "router.db")
    db.execute("INSERT INTO sessions (id, created, last_activity, state) VALUES ('s', 0, 0, 'active')")
    yield db
    db.close()


def test_requests_move_last_activity_once_a_second_and_never_further_behind(conn: sqlite3.Connection) -> None:
    writer = BatchWriter(None)
    updates: list[str] = []
    conn.set_trace_callback(lambda sql: updates.append(sql) if sql.startswith("UPDATE sessions") else None)
    base = 1000.0
    offsets = [0.0, 0.3, 0.9, ACTIVITY_EVERY_S + 0.05, ACTIVITY_EVERY_S + 0.6, 3 * ACTIVITY_EVERY_S]
    seen = []
    for seq, offset in enumerate(offsets, start=1):
        assert writer.write(conn, [_request(seq, base + offset)], 0) == []
        stored = _last_activity(conn)
        assert base + offset - stored < ACTIVITY_EVERY_S  # the promise to readers
        seen.append(stored - base)
    assert seen == pytest.approx([0.0, 0.0, 0.0, offsets[3], offsets[3], offsets[5]])
    assert len(updates) == 3, updates


def test_a_session_state_change_lets_the_next_request_move_it_at_once(conn: sqlite3.Connection) -> None:
    """A session coming back (reaped, then resumed) shows its new call, not the one before."""
    writer = BatchWriter(None)
    writer.write(conn, [_request(1, 1000.0), _state(2, 1000.1, "reaped"), _request(3, 1000.2)], 0)
    assert _last_activity(conn) == 1000.2


def test_a_rolled_back_request_does_not_count_as_having_moved_it(conn: sqlite3.Connection, tmp_path: Path) -> None:
    writer = BatchWriter(None)
    conn.execute("PRAGMA busy_timeout = 0")  # as the loop's connection rests
    other = sqlite3.connect(tmp_path / "router.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer: the batch fails as a whole and rolls back
    assert writer.write(conn, [_request(1, 1000.0)], 0) == [1]
    other.execute("COMMIT")
    other.close()
    assert writer.write(conn, [_request(2, 1000.5)], 0) == []
    assert _last_activity(conn) == 1000.5
