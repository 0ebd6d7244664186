"""Read side of the record: queries for the CLI, the JSON API and the router's own tools.

Uses its own aiosqlite connection (WAL lets it read while the recorder writes). The only write is
the diff cursor of ``read_content``: a single small statement, serialised with the writer by
SQLite's lock and busy_timeout.

Session families: ``create_new_session`` starts a child session (``parent_id``) inside the same
conversation, so a ref is readable from any session of the same family (same root); a ref of
another conversation is "not found", never its data.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from router.record import schema
from router.record.files import KeptFile
from router.record.text_views import format_console, level_rank, line_diff, search_diff, search_tree


class RecordError(Exception):
    """Base of the errors a tool turns into a tool error message."""


class RecordNotFound(RecordError, LookupError):
    """Unknown id, or an id of another conversation (indistinguishable on purpose)."""


class NoSnapshot(RecordError):
    """The call exists but recorded no page snapshot (e.g. browser_tabs, an error)."""


_FAMILY = """
WITH RECURSIVE up(id, parent_id, depth) AS (
    SELECT id, parent_id, 0 FROM sessions WHERE id = :sid
    UNION ALL
    SELECT s.id, s.parent_id, up.depth + 1 FROM sessions s JOIN up ON s.id = up.parent_id WHERE up.depth < 64
),
root(id) AS (SELECT id FROM up ORDER BY depth DESC LIMIT 1),
family(id, depth) AS (
    SELECT id, 0 FROM root
    UNION ALL
    SELECT s.id, family.depth + 1 FROM sessions s JOIN family ON s.parent_id = family.id
    WHERE family.depth < 64
)
"""


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _readonly_uri(db_path: Path) -> str:
    # Only string work (abspath does not touch the disk); kept out of the async function.
    return f"{Path(os.path.abspath(db_path)).as_uri()}?mode=ro"


def client_name(client_info: Any) -> str | None:
    """"name version" of an initialize's clientInfo, given parsed or as the recorded JSON text."""
    info = _loads(client_info) if isinstance(client_info, str) else client_info
    if isinstance(info, dict):
        name, version = info.get("name"), info.get("version")
        if name:
            return f"{name} {version}" if version else str(name)
    return None


class Records:
    def __init__(
        self, conn: aiosqlite.Connection, *, before_read: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        self._conn = conn
        # The router passes Recorder.flush so a tool reading a ref right after its call sees it.
        self._before_read = before_read

    @classmethod
    @asynccontextmanager
    async def open(
        cls, db_path: Path, *, readonly: bool = False,
        before_read: Callable[[], Awaitable[object]] | None = None,
    ) -> AsyncIterator[Records]:
        """A read connection. ``readonly`` (CLI) opens with mode=ro: it never creates or migrates
        the file; diff cursors cannot be written then."""
        if readonly:
            if not db_path.exists():  # noqa: ASYNC240 - one stat, by the CLI only
                # Refused here, not by aiosqlite: its failed connect leaves its thread a message
                # for this event loop, which fails in that thread if the loop has closed by then.
                raise sqlite3.OperationalError(f"unable to open database file {db_path}")
            # mode=ro fails on a missing file rather than creating it; the URI needs an absolute path.
            conn = await aiosqlite.connect(_readonly_uri(db_path), uri=True)
        else:
            conn = await aiosqlite.connect(db_path, isolation_level=None)
        try:
            conn.row_factory = aiosqlite.Row
            await conn.execute(f"PRAGMA busy_timeout = {schema.BUSY_TIMEOUT_MS}")
            if not readonly:
                # Its diff-cursor writes keep the writer's promise (a process kill loses nothing)
                # without the fsync per commit that SQLite's default costs every get_content.
                await conn.execute("PRAGMA synchronous = NORMAL")
            async with conn.execute("PRAGMA user_version") as cur:
                row = await cur.fetchone()
            version = int(row[0]) if row else 0
            if version != schema.SCHEMA_VERSION:
                raise schema.SchemaTooNew(
                    f"database schema v{version}, this code reads v{schema.SCHEMA_VERSION}"
                )
            yield cls(conn, before_read=before_read)
        finally:
            await conn.close()

    async def _sync(self) -> None:
        if self._before_read is not None:
            await self._before_read()

    async def _all(self, sql: str, params: Any = ()) -> list[aiosqlite.Row]:
        async with self._conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def _one(self, sql: str, params: Any = ()) -> aiosqlite.Row | None:
        async with self._conn.execute(sql, params) as cur:
            return await cur.fetchone()

    # ---------------------------------------------------------------- sessions and calls

    async def list_sessions(
        self, *, limit: int = 200, conversations: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """The newest sessions first; with ``conversations`` (hashed keys), only theirs."""
        await self._sync()
        where, params = "", (limit,)  # type: str, tuple[object, ...]
        if conversations is not None:
            where = f"WHERE s.conversation IN ({', '.join('?' for _ in conversations)})"
            params = (*conversations, limit)
        rows = await self._all(
            f"""SELECT s.id, s.state, s.created, s.last_activity, s.client_info, s.parent_id,
                      s.protocol_version, s.worker_port, s.worker_pid, s.conversation,
                      (SELECT count(*) FROM requests r WHERE r.session_id = s.id) AS requests,
                      (SELECT count(*) FROM requests r WHERE r.session_id = s.id
                         AND r.method = 'tools/call') AS calls,
                      (SELECT count(*) FROM requests r JOIN responses p ON p.ref_id = r.ref_id
                         WHERE r.session_id = s.id AND p.status = 'error') AS errors,
                      (SELECT e.detail FROM session_events e WHERE e.session_id = s.id
                         AND e.kind = 'resumed' ORDER BY e.ts DESC, e.id DESC LIMIT 1) AS last_resume
               FROM sessions s {where} ORDER BY s.created DESC LIMIT ?""",
            params,
        )
        return [
            {
                "id": r["id"], "state": r["state"], "created": r["created"],
                "last_activity": r["last_activity"], "client": client_name(r["client_info"]),
                "parent_id": r["parent_id"], "protocol_version": r["protocol_version"],
                "worker_port": r["worker_port"], "worker_pid": r["worker_pid"],
                "requests": r["requests"], "calls": r["calls"], "errors": r["errors"],
                "last_resume": r["last_resume"], "conversation": r["conversation"],
            }
            for r in rows
        ]

    async def get_session(self, session_id: str) -> dict[str, Any]:
        await self._sync()
        r = await self._one("SELECT * FROM sessions WHERE id = ?", (session_id,))
        if r is None:
            raise RecordNotFound(f"unknown session {session_id}")
        out = dict(r)
        out["client_info"], out["metadata"] = _loads(r["client_info"]), _loads(r["metadata"])
        return out

    async def session_events(self, session_id: str) -> list[dict[str, Any]]:
        """What happened to the session besides its calls (``kind`` 'resumed', ``detail`` the
        reason), oldest first."""
        await self._sync()
        rows = await self._all(
            "SELECT ts, kind, detail FROM session_events WHERE session_id = ? ORDER BY ts, id", (session_id,)
        )
        return [{"ts": r["ts"], "kind": r["kind"], "detail": r["detail"]} for r in rows]

    async def call_files(self, ref_id: str) -> list[KeptFile]:
        """The files kept for a call (in ``StateLayout.files_dir(ref_id)``), in link order."""
        rows = await self._all(
            "SELECT name, title, mime, size FROM call_files WHERE ref_id = ? ORDER BY rowid", (ref_id,)
        )
        return [KeptFile(r["name"], r["title"] or "", r["mime"], r["size"]) for r in rows]

    async def session_calls(self, session_id: str) -> list[dict[str, Any]]:
        """The timeline of one session, oldest first. ``files``: names of the files kept per call."""
        await self._sync()
        kept: dict[str, list[str]] = {}
        for f in await self._all(
            """SELECT f.ref_id, f.name FROM call_files f JOIN requests r ON r.ref_id = f.ref_id
               WHERE r.session_id = ? ORDER BY f.rowid""",
            (session_id,),
        ):
            kept.setdefault(f["ref_id"], []).append(f["name"])
        rows = await self._all(
            """SELECT r.ref_id, r.method, r.tool, r.params, r.ts, p.status, p.duration_ms, p.error,
                      p.page_snapshot IS NOT NULL AS has_snapshot
               FROM requests r LEFT JOIN responses p ON p.ref_id = r.ref_id
               WHERE r.session_id = ? ORDER BY r.ts, r.rowid""",
            (session_id,),
        )
        return [
            {
                "ref_id": r["ref_id"], "method": r["method"], "tool": r["tool"],
                "params": _loads(r["params"]), "ts": r["ts"], "status": r["status"],
                "duration_ms": r["duration_ms"], "error": r["error"],
                "has_snapshot": bool(r["has_snapshot"]), "files": kept.get(r["ref_id"], []),
            }
            for r in rows
        ]

    async def _call_row(self, ref_id: str, session_id: str | None) -> aiosqlite.Row:
        if session_id is None:
            row = await self._one(
                """SELECT r.*, p.status, p.result, p.page_snapshot, p.console_logs, p.error,
                          p.ts AS answered, p.duration_ms
                   FROM requests r LEFT JOIN responses p ON p.ref_id = r.ref_id WHERE r.ref_id = ?""",
                (ref_id,),
            )
        else:
            row = await self._one(
                _FAMILY + """SELECT r.*, p.status, p.result, p.page_snapshot, p.console_logs, p.error,
                                    p.ts AS answered, p.duration_ms
                   FROM requests r LEFT JOIN responses p ON p.ref_id = r.ref_id
                   WHERE r.ref_id = :ref AND (r.session_id = :sid
                         OR r.session_id IN (SELECT id FROM family))""",
                {"sid": session_id, "ref": ref_id},
            )
        if row is None:
            raise RecordNotFound(f"unknown ref_id {ref_id}")
        return row

    async def get_call(self, ref_id: str, *, session_id: str | None = None) -> dict[str, Any]:
        """One call with its result text, snapshot and console entries. With ``session_id`` the
        ref must belong to that session's family."""
        await self._sync()
        r = await self._call_row(ref_id, session_id)
        return {
            "ref_id": r["ref_id"], "session_id": r["session_id"], "method": r["method"],
            "tool": r["tool"], "params": _loads(r["params"]), "ts": r["ts"], "status": r["status"],
            "answered": r["answered"], "duration_ms": r["duration_ms"], "error": r["error"],
            "result": r["result"], "page_snapshot": r["page_snapshot"],
            "console_lines": _loads(r["console_logs"]),
            "console": await self._console(ref_id),
            "files": [
                {"name": f.name, "title": f.title, "mime": f.mime, "size": f.size}
                for f in await self.call_files(ref_id)
            ],
        }

    async def _console(self, ref_id: str) -> list[dict[str, Any]]:
        rows = await self._all(
            "SELECT level, message, location, ts FROM console_logs WHERE ref_id = ? ORDER BY id", (ref_id,)
        )
        return [
            {"level": r["level"], "message": r["message"], "location": _loads(r["location"]), "ts": r["ts"]}
            for r in rows
        ]

    # ---------------------------------------------------------------- router tools

    async def _snapshot(self, session_id: str, ref_id: str) -> str:
        row = await self._call_row(ref_id, session_id)
        snapshot = row["page_snapshot"]
        if snapshot is None:
            raise NoSnapshot(f"call {ref_id} recorded no page snapshot")
        return str(snapshot)

    async def read_content(
        self, session_id: str, ref_id: str, *, search_for: str | None = None,
        since_ref: str | None = None, reset_cursor: bool = False,
    ) -> str:
        """get_content. Rules:
        - the ref (and since_ref) must belong to session_id's family, else RecordNotFound;
        - ``since_ref``: line_diff(snapshot of since_ref, snapshot of ref); cursor untouched;
        - otherwise the cursor (session_id, ref_id): first read (or after ``reset_cursor``) gives
          the whole snapshot, a later read the line_diff since the text last given ('' if none);
          the cursor is stored in SQLite and survives restarts;
        - ``search_for`` is applied last (search_tree on a whole snapshot, search_diff on a diff).
          A search is a peek: it neither uses nor moves the cursor, so a second search for
          something else does not come back empty because the ref was "already read".
        """
        await self._sync()
        snapshot = await self._snapshot(session_id, ref_id)
        if since_ref is not None:
            base = await self._snapshot(session_id, since_ref)
            diff = line_diff(base, snapshot)
            return search_diff(diff, search_for) if search_for else diff
        if reset_cursor:
            await self._conn.execute(
                "DELETE FROM diff_cursors WHERE session_id = ? AND ref_id = ?", (session_id, ref_id)
            )
        if search_for:
            return search_tree(snapshot, search_for)
        row = await self._one(
            "SELECT last_text FROM diff_cursors WHERE session_id = ? AND ref_id = ?", (session_id, ref_id)
        )
        out = snapshot if row is None else line_diff(str(row["last_text"]), snapshot)
        await self._conn.execute(
            """INSERT INTO diff_cursors (session_id, ref_id, last_text, updated) VALUES (?, ?, ?, ?)
               ON CONFLICT (session_id, ref_id) DO UPDATE SET
                 last_text = excluded.last_text, updated = excluded.updated""",
            (session_id, ref_id, snapshot, time.time()),
        )
        return out

    async def read_console(self, session_id: str, ref_id: str, level: str | None = None) -> str:
        """get_console_content: the call's entries, one per line, at or above ``level``."""
        level_rank(level)  # ValueError before any lookup for a bad level
        await self._sync()
        await self._call_row(ref_id, session_id)
        return format_console(await self._console(ref_id), level)

    # ---------------------------------------------------------------- export

    async def export_session(self, session_id: str) -> AsyncIterator[str]:
        """JSON lines: one ``session`` object, then one ``call`` object per request, oldest first."""
        session = await self.get_session(session_id)
        events = await self.session_events(session_id)
        yield json.dumps({"type": "session", **session, "events": events}, ensure_ascii=False)
        async with self._conn.execute(
            """SELECT r.ref_id FROM requests r WHERE r.session_id = ? ORDER BY r.ts, r.rowid""",
            (session_id,),
        ) as cur:
            refs = [row[0] for row in await cur.fetchall()]
        for ref in refs:  # one call at a time: snapshots can be large
            call = await self.get_call(ref)
            yield json.dumps({"type": "call", **call}, ensure_ascii=False)
