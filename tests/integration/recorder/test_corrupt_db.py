"""A damaged router.db is moved aside (with its -wal/-shm) and a fresh one started; a newer
schema or a file that is merely locked is left alone."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import httpx
import pytest

from router.record import schema
from router.record.recorder import Recorder
from tests.support import RouterThread, auth_headers, router_settings

GARBAGE = b"this is not a database\n" * 512


def _aside(db: Path) -> list[Path]:
    """The main files moved aside (their -wal/-shm follow them)."""
    found = db.parent.glob(f"{db.name}{schema.CORRUPT_SUFFIX}*")
    return sorted(p for p in found if not p.name.endswith(schema.SIDE_FILES))


@pytest.fixture
def garbage_db(db_path: Path) -> Path:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(GARBAGE)
    db_path.with_name(db_path.name + "-wal").write_bytes(b"old wal")
    return db_path


async def test_a_garbage_file_is_moved_aside_and_recording_goes_on(
    garbage_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db_path = garbage_db
    rec = Recorder(db_path)
    with caplog.at_level(logging.ERROR):
        async with rec.run():
            rec.request("r1", "s", "ping", None, None)
            assert await rec.flush() is True
    _check_moved_aside(db_path)
    assert any(r.levelno == logging.ERROR and "damaged" in r.getMessage() for r in caplog.records)


def _check_moved_aside(db_path: Path) -> None:
    (main,) = _aside(db_path)
    assert main.read_bytes() == GARBAGE
    assert main.with_name(main.name + "-wal").read_bytes() == b"old wal"  # kept for inspection
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT ref_id FROM requests").fetchall() == [("r1",)]
    finally:
        conn.close()


def test_a_malformed_database_is_moved_aside(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    conn = schema.connect(db)
    conn.executemany("INSERT INTO recorder_failures (ts, what, error) VALUES (?, ?, ?)",
                     [(1.0, "x" * 100, "y" * 1000)] * 2000)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    data[100:4096 * 3] = b"\xff" * (4096 * 3 - 100)  # the schema pages, past the header
    db.write_bytes(bytes(data))
    conn = schema.connect_or_replace(db)
    try:
        assert schema.user_version(conn) == schema.SCHEMA_VERSION
    finally:
        conn.close()
    assert len(_aside(db)) == 1


def test_a_newer_schema_is_not_moved_aside(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(schema.SchemaTooNew):
        schema.connect_or_replace(db)
    assert _aside(db) == []


def test_a_locked_database_is_not_moved_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "router.db"
    schema.connect(db).close()
    monkeypatch.setattr(schema, "BUSY_TIMEOUT_MS", 50)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError):
            schema.connect_or_replace(db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _aside(db) == []


def test_the_router_starts_on_a_garbage_database(state_dir: Path) -> None:
    (state_dir / "router.db").write_bytes(GARBAGE)
    with RouterThread(router_settings(state_dir, record=True)) as router:
        answer = httpx.get(f"{router.base_url}/healthz", headers=auth_headers(), timeout=10, trust_env=False)
        assert answer.status_code == 200
    assert len(_aside(state_dir / "router.db")) == 1
