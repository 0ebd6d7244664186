"""What each queued record item becomes in SQLite (applied by router/record/batches.py), and
what an answer's linked files add to its row afterwards."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from router.layout import StateLayout
from router.record import files
from router.record.call_view import inline_images
from router.record.snapshots import extract, normalize_console, summarize, tool_result


@dataclass(frozen=True, slots=True)
class Item:
    kind: str  # "open" | "state" | "resumed" | "request" | "response" | "dropped"
    ts: float
    key: str  # session id or ref_id, for failure messages
    data: tuple[Any, ...]  # for "dropped": (how many items were refused at this point,)
    seq: int  # position in the stream of items; flush() waits on it
    size: int  # approximate bytes held in memory


# What an answer's text holds when it has something to read from the worker's files or to
# parse: a snapshot (inline or linked), new console entries, file links ("- [Title](path)"),
# console messages listed inline. An answer with none of them needs no Enrichment.
ENRICH_MARKERS: Final = ("### Snapshot", "### Events", "- [", "Total messages")
# Past this many nodes a value's size is measured by encoding it rather than by walking it.
SIZE_WALK_MAX_NODES: Final = 10_000
# A request moves its session's last_activity only when the one written is older than this: the
# column is read for retention (days) and for display next to the live sessions' own clock, and
# updating it on every call wrote two more pages (the row and its index) per answer's commit.
ACTIVITY_EVERY_S: Final = 1.0
# Sessions whose last written activity is remembered; past it the memory starts over (costing
# each session one more update).
ACTIVITY_SESSIONS_MAX: Final = 10_000


@dataclass(frozen=True, slots=True)
class Enrichment:
    """An answer's row is written before the answer leaves; what its linked files hold (the
    page snapshot, console lines, screenshots) is read onto the row right after, off that path."""

    ref_id: str
    ts: float
    result: Any  # the tools/call result, parsed or as JSON text
    output_dir: Path
    cwd: Path | None
    want_snapshot: bool
    want_console: bool


def to_json(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def scrubbed(item: Item) -> Item:
    """``item`` with no lone surrogate left in its text: SQLite takes only UTF-8, and such text
    (valid JSON, from a page or a client) would otherwise cost the row. An object becomes its JSON
    text with the surrogate escaped (read back, it is the same value); other text shows it as
    ``\\udXXX``. Only for an item that failed to encode: the usual one is never walked."""
    return Item(item.kind, item.ts, item.key, tuple(_scrub(v) for v in item.data), item.seq, item.size)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return json.dumps(value, separators=(",", ":"), default=str)  # ensure_ascii: escapes them
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v) for v in value)
    return value


class RowWriter:
    """Applies items on the writer thread. ``layout``: where the files a call linked are kept
    (None keeps only snapshots and console text); ``note_failure(what, error)``: a loss that must
    not cost the call's row (a file that could not be copied)."""

    def __init__(self, layout: StateLayout | None, note_failure: Callable[[str, str], None]) -> None:
        self.layout = layout
        self.note_failure = note_failure
        # session id -> the last_activity a request wrote in this run (see ACTIVITY_EVERY_S).
        self._activity: dict[str, float] = {}

    def forget_activity(self) -> None:
        """A transaction was rolled back: what it wrote of last_activity is not in the file."""
        self._activity.clear()

    def apply(self, conn: sqlite3.Connection, item: Item) -> Enrichment | None:
        """One queued item as rows, inside the caller's transaction; for an answer that linked
        files, what is still to be read from them (``enrich``, after the commit)."""
        ts, key, d = item.ts, item.key, item.data
        if item.kind == "open":
            client_info, protocol_version, port, pid, metadata, parent_id, conversation = d
            conn.execute(
                """INSERT INTO sessions (id, created, last_activity, state, client_info, protocol_version,
                                         worker_port, worker_pid, metadata, parent_id, conversation)
                   VALUES (?, ?, ?, 'active', ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (id) DO UPDATE SET
                     state = 'active', last_activity = max(last_activity, excluded.last_activity),
                     client_info = coalesce(excluded.client_info, client_info),
                     protocol_version = coalesce(excluded.protocol_version, protocol_version),
                     worker_port = excluded.worker_port, worker_pid = excluded.worker_pid,
                     metadata = coalesce(excluded.metadata, metadata),
                     parent_id = coalesce(excluded.parent_id, parent_id),
                     conversation = coalesce(excluded.conversation, conversation)""",
                (key, ts, ts, to_json(client_info), protocol_version, port, pid, to_json(metadata), parent_id,
                 conversation),
            )
        elif item.kind == "state":
            self._activity.pop(key, None)
            # Upsert: a state change must not be lost because session_opened was dropped.
            conn.execute(
                """INSERT INTO sessions (id, created, last_activity, state) VALUES (?, ?, ?, ?)
                   ON CONFLICT (id) DO UPDATE SET state = excluded.state""",
                (key, ts, ts, d[0]),
            )
        elif item.kind == "resumed":
            conn.execute(
                "INSERT INTO session_events (session_id, ts, kind, detail) VALUES (?, ?, 'resumed', ?)",
                (key, ts, d[0]),
            )
            conn.execute("UPDATE sessions SET last_activity = max(last_activity, ?) WHERE id = ?", (ts, key))
        elif item.kind == "request":
            session_id, method, tool, params = d
            conn.execute(
                """INSERT INTO requests (ref_id, session_id, method, tool, params, ts)
                   VALUES (?, ?, ?, ?, ?, ?)""",
                (key, session_id, method, tool, to_json(params), ts),
            )
            self._bump_activity(conn, session_id, ts)
        elif item.kind == "response":
            return self._apply_response(conn, item)
        else:
            raise ValueError(f"unknown item kind {item.kind!r}")
        return None

    def _bump_activity(self, conn: sqlite3.Connection, session_id: str, ts: float) -> None:
        """last_activity stays within ACTIVITY_EVERY_S of the session's last request: a request
        that soon after the last one written leaves it be."""
        last = self._activity.get(session_id)
        if last is not None and ts - last < ACTIVITY_EVERY_S:
            return
        conn.execute("UPDATE sessions SET last_activity = max(last_activity, ?) WHERE id = ?", (ts, session_id))
        if len(self._activity) >= ACTIVITY_SESSIONS_MAX:
            self._activity.clear()
        self._activity[session_id] = ts

    def _apply_response(self, conn: sqlite3.Connection, item: Item) -> Enrichment | None:
        """The row the answer promised; what is read from the worker's files comes later."""
        status, result, page_snapshot, console_lines, error, duration_ms, output_dir, cwd = item.data
        result_text = to_json(result)
        # Nothing to read for an answer without any of the markers (browser_tabs, an error...).
        enrich = bool(output_dir) and result_text is not None and (
            isinstance(result, Mapping) or any(marker in result_text for marker in ENRICH_MARKERS)
        )
        if enrich and page_snapshot is None and console_lines is None:
            # What there is to keep may all be in the answer's text (an inline snapshot, console
            # lines) or in small linked files: read for the row itself, not by an enrichment
            # after its commit (a second transaction).
            try:
                parsed = tool_result(result)
                facts = summarize(parsed) if parsed is not None else None
                now = facts.for_record(Path(output_dir)) if facts is not None else None
            except Exception:  # the row first: what went wrong is the enrichment's to meet, apart
                now = None
            if now is not None:
                page_snapshot, console_lines = now
                enrich = False
        lines = list(console_lines) if console_lines else None
        conn.execute(
            """INSERT INTO responses (ref_id, status, result, page_snapshot, console_logs, error, ts,
                                      duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
            (item.key, status, result_text, page_snapshot, to_json(lines), error, item.ts, duration_ms),
        )
        if lines:
            self._insert_console(conn, item.key, lines, item.ts)
        if not enrich:
            return None
        assert output_dir is not None and result_text is not None
        return Enrichment(
            item.key, item.ts, result if isinstance(result, Mapping) else result_text, Path(output_dir), cwd,
            want_snapshot=page_snapshot is None, want_console=console_lines is None,
        )

    def enrich(self, conn: sqlite3.Connection, job: Enrichment) -> None:
        """The snapshot, console lines and files an answer linked, read from the worker's output
        dir onto its row, inside the caller's transaction."""
        parsed = tool_result(job.result)
        if parsed is None:
            return
        if job.want_snapshot or job.want_console:
            ex = extract(parsed, job.output_dir, cwd=job.cwd)
            snapshot = ex.page_snapshot if job.want_snapshot else None
            lines = list(ex.console_lines) if job.want_console and ex.console_lines else None
            if snapshot is not None or lines:
                conn.execute(
                    """UPDATE responses SET page_snapshot = coalesce(page_snapshot, ?),
                                            console_logs = coalesce(console_logs, ?) WHERE ref_id = ?""",
                    (snapshot, to_json(lines), job.ref_id),
                )
            if lines:
                self._insert_console(conn, job.ref_id, lines, job.ts)
        if self.layout is not None:
            self._keep_files(conn, job.ref_id, job.ts, parsed, job.output_dir, job.cwd)

    @staticmethod
    def _insert_console(conn: sqlite3.Connection, ref_id: str, lines: list[str], ts: float) -> None:
        conn.executemany(
            "INSERT INTO console_logs (ref_id, level, message, location, ts) VALUES (?, ?, ?, ?, ?)",
            [(ref_id, e["level"], e["message"], to_json(e["location"]), ts) for e in normalize_console(lines)],
        )

    def _keep_files(
        self, conn: sqlite3.Connection, ref_id: str, ts: float, result: Mapping[str, Any], output_dir: Path,
        cwd: Path | None,
    ) -> None:
        """Copies what the answer linked; a file that cannot be kept never costs the call's row."""
        assert self.layout is not None
        try:
            inline = [img.data for img in inline_images(result) if img.data is not None]
            kept = files.keep_linked(result, output_dir, self.layout.files_dir(ref_id), cwd=cwd, inline=inline)
        except Exception as exc:
            self.note_failure(f"files {ref_id}", repr(exc))
            return
        conn.executemany(
            "INSERT OR REPLACE INTO call_files (ref_id, name, title, mime, size, ts) VALUES (?, ?, ?, ?, ?, ?)",
            [(ref_id, f.name, f.title, f.mime, f.size, ts) for f in kept],
        )


def approx_size(value: Any) -> int:
    """Bytes a value holds, roughly, without encoding it on the proxy's path when it is small
    or flat (the usual case); a deep value past SIZE_WALK_MAX_NODES is encoded once instead."""
    kind = type(value)
    if kind is bytes or kind is str:  # the worker's bytes of an answer: no walk
        return len(value)
    if value is None:
        return 8
    stack, total, nodes = [value], 0, 0
    while stack:
        item = stack.pop()
        nodes += 1
        if nodes > SIZE_WALK_MAX_NODES:
            return len(to_json(value) or "")
        if isinstance(item, (str, bytes, bytearray)):  # a tuple: a union is built at each test
            total += len(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            total += 8
    return total
