from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from router.record import schema


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_connect_creates_wal_file_at_current_version(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "router.db"
    conn = schema.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == schema.BUSY_TIMEOUT_MS
        assert schema.user_version(conn) == schema.SCHEMA_VERSION >= 1
        assert {"sessions", "requests", "responses", "console_logs", "diff_cursors",
                "recorder_failures"} <= _tables(conn)
        indices = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"requests_session_ts", "console_logs_ts"} <= indices
    finally:
        conn.close()
    # WAL is a property of the file: a fresh plain connection sees it.
    plain = sqlite3.connect(db)
    try:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        plain.close()


def test_migrating_twice_is_a_no_op(tmp_path: Path) -> None:
    conn = schema.connect(tmp_path / "r.db")
    try:
        conn.execute("INSERT INTO sessions (id, created, last_activity, state) VALUES ('s', 1, 1, 'active')")
        before = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
        assert schema.migrate(conn) == schema.SCHEMA_VERSION
        assert schema.migrate(conn) == schema.SCHEMA_VERSION
        assert conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == before
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    finally:
        conn.close()


def test_v0_empty_file_migrates(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.write_bytes(b"")  # a zero-byte file is a valid, empty v0 database
    conn = schema.connect(db)
    try:
        assert schema.user_version(conn) == schema.SCHEMA_VERSION
        assert "responses" in _tables(conn)
    finally:
        conn.close()


def test_failed_migration_leaves_previous_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
    try:
        broken = (schema.MIGRATIONS[0][0], "THIS IS NOT SQL")
        monkeypatch.setattr(schema, "MIGRATIONS", (broken,))
        with pytest.raises(sqlite3.OperationalError):
            schema.migrate(conn)
        assert schema.user_version(conn) == 0
        assert "sessions" not in _tables(conn)  # the first statement was rolled back too
    finally:
        conn.close()


def test_newer_file_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
    try:
        conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
        with pytest.raises(schema.SchemaTooNew):
            schema.migrate(conn)
    finally:
        conn.close()


def test_a_v1_file_migrates_with_its_rows(tmp_path: Path) -> None:
    """A record written before kept files and session events gains both tables, rows intact."""
    conn = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
    try:
        for statement in schema.MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        conn.execute("INSERT INTO sessions (id, created, last_activity, state) VALUES ('s', 1, 1, 'closed')")
        assert schema.migrate(conn) == schema.SCHEMA_VERSION >= 3
        assert {"call_files", "session_events"} <= _tables(conn)
        assert conn.execute("SELECT id FROM sessions").fetchall() == [("s",)]
    finally:
        conn.close()


def _indexes(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA index_list({table})")}


def test_a_call_keeps_up_no_index_on_its_rows_ts(tmp_path: Path) -> None:
    """A tool answer's commit inserts a request and a response: the indexes it keeps up are their
    keys and the session's calls in order, nothing only retention would read."""
    conn = schema.connect(tmp_path / "r.db")
    try:
        assert _indexes(conn, "requests") == {"sqlite_autoindex_requests_1", "requests_session_ts"}
        assert _indexes(conn, "responses") == {"sqlite_autoindex_responses_1"}
    finally:
        conn.close()


def test_a_v3_file_migrates_with_its_rows_and_drops_the_ts_indexes(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
    try:
        for statements in schema.MIGRATIONS[:3]:
            for statement in statements:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 3")
        conn.execute("INSERT INTO requests (ref_id, session_id, method, ts) VALUES ('r', 's', 'tools/call', 5)")
        conn.execute("INSERT INTO responses (ref_id, status, ts) VALUES ('r', 'success', 6)")
        assert "requests_ts" in _indexes(conn, "requests")
        assert schema.migrate(conn) == schema.SCHEMA_VERSION >= 4
        assert "requests_ts" not in _indexes(conn, "requests")
        assert "responses_ts" not in _indexes(conn, "responses")
        assert conn.execute("SELECT r.ts, p.ts FROM requests r JOIN responses p USING (ref_id)").fetchall() == [(5, 6)]
    finally:
        conn.close()


def test_prune_deletes_exactly_the_calls_older_than_the_cutoff(tmp_path: Path) -> None:
    """Without an index on ts the rows older than the cutoff are found by rowid (they are
    appended in time order); a row stamped out of order (the clock stepped back) is never
    deleted before its time."""
    conn = schema.connect(tmp_path / "r.db")
    try:
        stamps = [float(t) for t in range(0, 100, 3)] + [10.0, 200.0, 250.0]  # 10.0: a step back
        for i, ts in enumerate(stamps):
            conn.execute("INSERT INTO requests (ref_id, session_id, method, ts) VALUES (?, 's', 'm', ?)",
                         (f"r{i}", ts))
            conn.execute("INSERT INTO responses (ref_id, status, ts) VALUES (?, 'success', ?)", (f"r{i}", ts + 1))
        for cutoff in (-1.0, 0.5, 47.0, 47.5, 220.0, 300.0):
            schema.prune(conn, cutoff)
            for table, offset in (("requests", 0.0), ("responses", 1.0)):
                left = sorted(r[0] for r in conn.execute(f"SELECT ts FROM {table}"))
                expected = sorted(ts + offset for ts in stamps if ts + offset >= cutoff)
                assert not [ts for ts in left if ts < cutoff and ts > 10.0 + offset], (table, cutoff, left)
                assert [ts for ts in left if ts >= cutoff] == expected, (table, cutoff, left)
        assert conn.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
    finally:
        conn.close()


def test_prune_with_nothing_old_reads_no_table_through(tmp_path: Path) -> None:
    """The hourly prune finds where the old rows end by seeking, never by reading every row (the
    writer thread is busy meanwhile, and so are the answers waiting for it to commit)."""
    conn = schema.connect(tmp_path / "r.db")
    try:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO requests (ref_id, session_id, method, ts) VALUES (?, 's', 'm', ?)",
                         [(f"r{i}", 1000.0 + i) for i in range(20_000)])
        conn.executemany("INSERT INTO responses (ref_id, status, ts) VALUES (?, 'success', ?)",
                         [(f"r{i}", 1000.5 + i) for i in range(20_000)])
        conn.execute("COMMIT")
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        conn.set_progress_handler(count, 100)
        schema.prune(conn, 500.0)
        conn.set_progress_handler(None, 0)
        assert steps[0] < 100, f"{steps[0] * 100} VM steps: a table or index was read through"
        assert conn.execute("SELECT count(*) FROM requests").fetchone()[0] == 20_000
    finally:
        conn.close()
