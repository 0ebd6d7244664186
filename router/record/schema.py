"""SQLite schema of the record, its forward migrations, and the maintenance statements
(start-up marking, retention) that run on the writer's connection.

The schema version lives in ``PRAGMA user_version``. ``MIGRATIONS[i]`` takes the file from version
``i`` to ``i + 1``; a migration is a tuple of single statements (not a script) so that it runs
inside one explicit transaction together with the version bump: a crash half-way leaves the file
at the previous version, never in between.

Migrations run on a plain ``sqlite3`` connection. The recorder's writer owns such a connection on
its own thread (one thread hop per batch instead of one per statement, which aiosqlite would cost),
and the CLI can migrate without an event loop.

Timestamps are REAL seconds since the epoch (``time.time()``): cheap to compare for retention and
ordering; formatting is the reader's job.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

# Session states. Not enforced by a CHECK constraint on purpose: other issues (resume, health) add
# states, and widening a CHECK in SQLite means rebuilding the table.
#   active       a worker serves the session now
#   degraded     the session lives but its worker is unhealthy / restarting
#   hibernated   the worker was stopped to save memory; the session may be resumed
#   reaped       ended by the idle reaper
#   closed       ended by the client (DELETE) or the router's shutdown
#   error        ended because the worker could not be (re)started
#   interrupted  a previous router run died (crash, SIGKILL) while the session was active or
#                degraded; set at start-up. ``metadata.interrupted_from`` keeps the old state so
#                that a resume feature can tell what it was.
LIVE_STATES: Final = ("active", "degraded")
# Why a dormant (or crashed) session got a worker again:
#   idle            reaped after the idle timeout, resumed by the client's next call
#   crash           its worker died and was restarted
#   hibernation     hibernated to make room (or by the operator), woken by a call
#   router-restart  taken up by a new run of the router
#   new-browser     create_new_session gave the conversation a fresh browser
#   conversation    a new session of a conversation took up the browser its last session left
RESUME_REASONS: Final = ("idle", "crash", "hibernation", "router-restart", "new-browser", "conversation")

BUSY_TIMEOUT_MS: Final = 5000
# What a damaged file answers; anything else (locked, unreadable, disk I/O) is not the file's fault
# and must not get it moved aside.
CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
CORRUPT_SUFFIX: Final = ".corrupt-"
SIDE_FILES: Final = ("-wal", "-shm")

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # 0 -> 1: initial schema.
    (
        """CREATE TABLE sessions (
            id               TEXT PRIMARY KEY,
            created          REAL NOT NULL,
            last_activity    REAL NOT NULL,
            state            TEXT NOT NULL,
            client_info      TEXT,      -- JSON: clientInfo of initialize
            protocol_version TEXT,
            worker_port      INTEGER,
            worker_pid       INTEGER,
            metadata         TEXT,      -- JSON object
            parent_id        TEXT       -- session that create_new_session started this one from
        )""",
        "CREATE INDEX sessions_last_activity ON sessions(last_activity)",
        "CREATE INDEX sessions_parent ON sessions(parent_id)",
        "CREATE INDEX sessions_state ON sessions(state)",
        """CREATE TABLE requests (
            ref_id     TEXT PRIMARY KEY,  -- UUID the router gives every client->worker request
            session_id TEXT NOT NULL,
            method     TEXT NOT NULL,
            tool       TEXT,              -- params.name of tools/call, else NULL
            params     TEXT,              -- JSON
            ts         REAL NOT NULL
        )""",
        "CREATE INDEX requests_session_ts ON requests(session_id, ts)",
        "CREATE INDEX requests_ts ON requests(ts)",
        """CREATE TABLE responses (
            ref_id        TEXT PRIMARY KEY,
            status        TEXT NOT NULL CHECK (status IN ('success', 'error')),
            result        TEXT,           -- JSON-RPC result or error, compact JSON; a tool result
                                          -- as the client got it, its _meta.refId set
            page_snapshot TEXT,           -- YAML exactly as produced (inline or linked file)
            console_logs  TEXT,           -- JSON list of the raw console lines
            error         TEXT,
            ts            REAL NOT NULL,
            duration_ms   REAL
        )""",
        "CREATE INDEX responses_ts ON responses(ts)",
        """CREATE TABLE console_logs (
            id       INTEGER PRIMARY KEY,
            ref_id   TEXT NOT NULL,
            level    TEXT NOT NULL CHECK (level IN ('debug', 'info', 'warn', 'error')),
            message  TEXT NOT NULL,
            location TEXT,                -- JSON {"url": ..., "line": ...} or NULL
            ts       REAL NOT NULL
        )""",
        "CREATE INDEX console_logs_ref ON console_logs(ref_id)",
        "CREATE INDEX console_logs_ts ON console_logs(ts)",
        """CREATE TABLE diff_cursors (
            session_id TEXT NOT NULL,
            ref_id     TEXT NOT NULL,
            last_text  TEXT NOT NULL,     -- what get_content last returned in full for this ref
            updated    REAL NOT NULL,
            PRIMARY KEY (session_id, ref_id)
        )""",
        "CREATE INDEX diff_cursors_updated ON diff_cursors(updated)",
        """CREATE TABLE recorder_failures (
            id    INTEGER PRIMARY KEY,
            ts    REAL NOT NULL,
            what  TEXT NOT NULL,
            error TEXT NOT NULL
        )""",
        "CREATE INDEX recorder_failures_ts ON recorder_failures(ts)",
    ),
    # 1 -> 2: files a call linked, copied into StateLayout.files_dir(ref_id) (router/record/files.py).
    (
        """CREATE TABLE call_files (
            ref_id TEXT NOT NULL,
            name   TEXT NOT NULL,         -- file name inside files/<ref_id>/
            title  TEXT,                  -- the link's title in the answer
            mime   TEXT NOT NULL,
            size   INTEGER NOT NULL,
            ts     REAL NOT NULL,
            PRIMARY KEY (ref_id, name)
        )""",
        "CREATE INDEX call_files_ts ON call_files(ts)",
    ),
    # 2 -> 3: what happened to a session besides its calls, e.g. why it resumed.
    (
        """CREATE TABLE session_events (
            id         INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            ts         REAL NOT NULL,
            kind       TEXT NOT NULL,     -- 'resumed'
            detail     TEXT               -- for 'resumed': one of RESUME_REASONS
        )""",
        "CREATE INDEX session_events_session ON session_events(session_id, ts)",
        "CREATE INDEX session_events_ts ON session_events(ts)",
    ),
    # 3 -> 4: requests and responses are pruned by rowid (see prune), so no index on their ts is
    # kept up on every tool answer's commit (two B-tree inserts, two pages of WAL per call).
    (
        "DROP INDEX IF EXISTS requests_ts",
        "DROP INDEX IF EXISTS responses_ts",
    ),
    # 4 -> 5: the conversation a session continues (its hashed key), linking a conversation's sessions.
    (
        "ALTER TABLE sessions ADD COLUMN conversation TEXT",
        "CREATE INDEX sessions_conversation ON sessions(conversation)",
    ),
)
# Tables whose rows are appended in time order and pruned by rowid (see prune).
APPENDED: Final = ("responses", "requests")

SCHEMA_VERSION: Final = len(MIGRATIONS)


class SchemaTooNew(RuntimeError):
    """The file was written by a newer mcp-router; refusing to guess at its layout."""


def configure(conn: sqlite3.Connection) -> None:
    """Per-connection settings. WAL lets readers (API, CLI) run while the writer commits;
    synchronous=NORMAL in WAL loses nothing on a process kill (only on power loss) and skips an
    fsync per commit, which is what keeps a commit per batch cheap."""
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")


def connect(db_path: Path) -> sqlite3.Connection:
    """A configured, migrated connection in autocommit mode (transactions are explicit).

    ``check_same_thread=False`` because the recorder creates it on its writer thread through an
    executor; it is still only ever used by that one thread.
    """
    conn = _open(db_path)
    try:
        configure(conn)
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _open(db_path: Path) -> sqlite3.Connection:
    db_path.parent.mkdir(parents=True, exist_ok=True)
    return sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)


def is_corrupt(exc: sqlite3.Error) -> bool:
    """The error says the file itself is damaged (not a database, malformed)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return type(exc) is sqlite3.DatabaseError
    return (int(code) & 0xFF) in CORRUPT_CODES


def set_aside(db_path: Path) -> Path:
    """Rename a damaged file (and its -wal/-shm, so it can still be opened for forensics) to
    ``<name>.corrupt-<UTC time>``. Returns the new path of the main file."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = db_path.with_name(f"{db_path.name}{CORRUPT_SUFFIX}{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = db_path.with_name(f"{db_path.name}{CORRUPT_SUFFIX}{stamp}.{n}")
    for suffix in ("", *SIDE_FILES):
        source = db_path.with_name(db_path.name + suffix)
        if source.exists():
            os.replace(source, target.with_name(target.name + suffix))
    return target


def connect_or_replace(db_path: Path) -> sqlite3.Connection:
    """``connect``, but a damaged file is moved aside (logged at ERROR) and a fresh one started,
    so that a corrupt record never keeps the router from starting. A newer schema
    (SchemaTooNew) and errors that are not the file's own (locked, unreadable) still raise."""
    conn = _open(db_path)
    try:
        configure(conn)
        migrate(conn)
        return conn
    except sqlite3.DatabaseError as exc:
        if not is_corrupt(exc):
            conn.close()
            raise
        # Renamed while still open: closing the last connection deletes the -wal it knows by name.
        moved = set_aside(db_path)
        conn.close()
        log.error(
            "record database %s is damaged (%s): moved aside to %s; starting a fresh one "
            "(the old record stays there for inspection)", db_path, exc, moved,
        )
    except BaseException:
        conn.close()
        raise
    return connect(db_path)


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction taken at once (``BEGIN IMMEDIATE``: the write lock), rolled back on
    any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the file to SCHEMA_VERSION; a no-op when it is there already. Returns the version.

    Each step re-reads the version under ``BEGIN IMMEDIATE`` (the write lock), so two processes
    migrating the same file at once cannot both apply a step.
    """
    found = user_version(conn)
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(f"database schema v{found} is newer than this code (v{SCHEMA_VERSION})")
    for target, statements in enumerate(MIGRATIONS, start=1):
        if user_version(conn) >= target:
            continue
        with immediate(conn):
            if user_version(conn) < target:
                for statement in statements:
                    conn.execute(statement)
                # PRAGMA takes no parameters; target is an int from enumerate.
                conn.execute(f"PRAGMA user_version = {target}")
    return user_version(conn)


def mark_interrupted(conn: sqlite3.Connection) -> int:
    """At start-up: sessions still live in the file belong to a run that died (nothing serves them
    now). Their rows and history stay; only the state changes. Returns how many."""
    placeholders = ", ".join("?" for _ in LIVE_STATES)
    cur = conn.execute(
        f"""UPDATE sessions SET
              metadata = json_set(CASE WHEN json_valid(metadata) THEN metadata ELSE '{{}}' END,
                                  '$.interrupted_from', state),
              state = 'interrupted'
            WHERE state IN ({placeholders})""",
        LIVE_STATES,
    )
    return cur.rowcount


def prune_files(conn: sqlite3.Connection, cutoff: float) -> list[str]:
    """Delete the kept-file rows older than ``cutoff``; the ref_ids whose files must go."""
    with immediate(conn):
        refs = [r[0] for r in conn.execute("SELECT DISTINCT ref_id FROM call_files WHERE ts < ?", (cutoff,))]
        conn.execute("DELETE FROM call_files WHERE ts < ?", (cutoff,))
    return refs


def prune(conn: sqlite3.Connection, cutoff: float) -> list[str]:
    """Delete rows older than ``cutoff`` (epoch seconds) and the ended sessions idle since before
    it; live sessions stay whatever their age. Returns the deleted session ids. (Kept files go
    first, through ``prune_files``, so that their directories can be removed.)"""
    with immediate(conn):
        placeholders = ", ".join("?" for _ in LIVE_STATES)
        ids = [r[0] for r in conn.execute(
            f"SELECT id FROM sessions WHERE last_activity < ? AND state NOT IN ({placeholders})",
            (cutoff, *LIVE_STATES),
        )]
        conn.executemany("DELETE FROM sessions WHERE id = ?", [(i,) for i in ids])
        conn.executemany("DELETE FROM session_events WHERE session_id = ?", [(i,) for i in ids])
        for table, column in (("console_logs", "ts"), ("diff_cursors", "updated"), ("recorder_failures", "ts"),
                              ("session_events", "ts")):
            conn.execute(f"DELETE FROM {table} WHERE {column} < ?", (cutoff,))
        for table in APPENDED:
            last = last_rowid_before(conn, table, cutoff)
            if last is not None:
                # Bounded by ts as well: a row the clock stamped out of order is never deleted early.
                conn.execute(f"DELETE FROM {table} WHERE rowid <= ? AND ts < ?", (last, cutoff))
    return ids


def last_rowid_before(conn: sqlite3.Connection, table: str, cutoff: float) -> int | None:
    """The last row of ``table`` (one of APPENDED) stamped before ``cutoff``, by binary search
    over rowids: the record appends these rows in the order of their ts (a queued item's ts is
    its enqueue time, and items are written in that order), so the rows older than a cutoff are
    the first ones. After a step back of the wall clock the search may stop short of some old
    rows; a later prune takes them."""
    # Two subqueries: min() and max() together would scan the table instead of reading its ends.
    lo, hi = conn.execute(f"SELECT (SELECT min(rowid) FROM {table}), (SELECT max(rowid) FROM {table})").fetchone()
    found: int | None = None
    while lo is not None and lo <= hi:
        mid = (lo + hi) // 2
        rowid, ts = conn.execute(
            f"SELECT rowid, ts FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1", (mid,)
        ).fetchone()
        if ts < cutoff:
            found, lo = rowid, rowid + 1
        else:
            hi = mid - 1
    return found
