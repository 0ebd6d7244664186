"""Plain-text tables for the CLI (``mcp-router sessions`` / ``show``). Input: the dicts of
router.record.records; output: a string without a trailing newline."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

PARAMS_WIDTH = 60


def format_ts(ts: float | None, tz: tzinfo | None = None) -> str:
    """Local time by default (a person reads it); tests pass UTC."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M:%S")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        out = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in pairs]
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def format_sessions_table(rows: Sequence[Mapping[str, Any]], *, tz: tzinfo | None = None) -> str:
    """The record's sessions; rows from a running router also show worker pid, port and memory."""
    if not rows:
        return "no sessions recorded"
    live = any("memory_bytes" in r for r in rows)
    body = []
    for r in rows:
        line = [
            str(r["id"]), str(r["state"]), format_ts(r.get("created"), tz),
            format_ts(r.get("last_activity"), tz), str(r.get("calls", 0)), str(r.get("errors", 0)),
            str(r.get("client") or "-"),
        ]
        if live:
            memory, host = r.get("memory_bytes"), r.get("host")
            line += [
                str(r.get("worker_pid") or "-"), str(r.get("worker_port") or "-"),
                f"host {host}" if host else f"{memory / 2**20:.0f} MiB" if memory else "-",
            ]
        body.append(line)
    headers = ["ID", "STATE", "CREATED", "LAST ACTIVITY", "CALLS", "ERRORS", "CLIENT"]
    if live:
        headers += ["PID", "PORT", "MEMORY"]
    return _table(headers, body, frozenset({4, 5}))


def format_hosts(hosts: Sequence[Mapping[str, Any]]) -> str:
    """The workers a running router's sessions share (--sessions-per-browser): sessions, memory."""
    if not hosts:
        return "shared browsers: none running"
    body = [
        [str(h.get("id")), str(h.get("pid") or "-"), str(h.get("sessions", 0)), str(h.get("capacity_left", "-")),
         f"{h['pss_bytes'] / 2**20:.0f} MiB" if h.get("pss_bytes") else "-"]
        for h in hosts
    ]  # fmt: skip
    return _table(["HOST", "PID", "SESSIONS", "PLACES LEFT", "MEMORY"], body, frozenset({2, 3, 4}))


def format_reserve(workers: int, cap: int) -> str:
    """The resume reserve of a running router: warm workers that serve no session yet."""
    if cap <= 0:
        return "resume reserve: none (--resume-reserve 0)"
    plural = "" if workers == 1 else "s"
    return f"resume reserve: {workers} warm worker{plural} (at most {cap}, while browsed sessions sleep)"


def _short(value: Any, width: int = PARAMS_WIDTH) -> str:
    if value is None or value == {}:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def format_timeline(
    rows: Sequence[Mapping[str, Any]], *, events: Sequence[Mapping[str, Any]] = (),
    files_dir: Callable[[str], Path] | None = None, tz: tzinfo | None = None,
) -> str:
    """One line per request: time, ref_id, tool (or method), status, duration, arguments; the
    session's events (why it resumed) in time order between them; under a call, the files the
    record kept for it (``files_dir(ref_id) / name``)."""
    if not rows and not events:
        return "no calls recorded"
    entries: list[tuple[float, int, list[str], list[str]]] = []
    for i, r in enumerate(rows):
        params = r.get("params")
        args = params.get("arguments") if isinstance(params, Mapping) and r.get("tool") else params
        duration = r.get("duration_ms")
        line = [
            format_ts(r.get("ts"), tz), str(r["ref_id"]), str(r.get("tool") or r.get("method")),
            str(r.get("status") or "pending"), "-" if duration is None else f"{duration:.0f} ms",
            _short(r.get("error")) if r.get("status") == "error" and r.get("error") else _short(args),
        ]
        kept = [f"  file: {files_dir(str(r['ref_id'])) / name if files_dir else name}" for name in r.get("files") or ()]
        entries.append((r.get("ts") or 0.0, i, line, kept))
    for e in events:
        what = f"{e.get('kind')} ({e['detail']})" if e.get("detail") else str(e.get("kind"))
        entries.append((e.get("ts") or 0.0, -1, [format_ts(e.get("ts"), tz), "-", what, "", "", ""], []))
    entries.sort(key=lambda t: (t[0], t[1]))
    table = _table(["TIME", "REF_ID", "CALL", "STATUS", "DURATION", "DETAIL"], [e[2] for e in entries],
                   frozenset({4})).split("\n")
    out = table[:2]
    for text, (_, _, _, kept) in zip(table[2:], entries, strict=True):
        out += [text, *kept]
    return "\n".join(out)
