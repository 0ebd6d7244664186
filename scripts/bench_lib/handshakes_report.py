"""The handshakes phase's tables and its resume goals (bench_lib/handshakes.py measures)."""

from __future__ import annotations

import statistics

from bench_lib.handshakes import PING_WITHIN, HandshakeResults
from bench_lib.handshakes_resume import STEADY_CALLS, AtOnce, AtOnceRow, FirstCallRow
from bench_lib.measure import pct
from bench_lib.report import Goal


def _ms(values: list[float], q: float = 50) -> str:
    return f"{pct(values, q):.1f}" if values else "—"


def tables(r: HandshakeResults) -> list[str]:
    out = [
        "### Handshakes of a Claude-Code-shaped client (`initialize` → `notifications/initialized` → GET "
        "stream → `tools/list`; roots + elicitation declared; median of new conversations)",
        "",
        "| path | n | `initialize` ms | whole handshake ms | note |",
        "|---|---:|---:|---:|---|",
    ]
    for row in (r.direct, r.direct_cold, r.router_first, r.router_later):
        out.append(f"| {row.label} | {len(row.init)} | {_ms(row.init)} | {_ms(row.total)} | {row.note} |")
    out += [
        "",
        "### Handshakes at once (each client its own connection, as separate Claude Code processes would)",
        "",
        "| path | at once × rounds | `initialize` p50 ms | p95 ms | whole handshake p50 ms | p95 ms | errors "
        "| worker processes left |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for c in (r.routed_at_once, r.direct_at_once):
        err = f"{c.errors} ({c.first_error})" if c.errors else "0"
        left = "—" if c.workers_after is None else str(c.workers_after)
        out.append(
            f"| {c.label} | {c.at_once} × {c.rounds} | {_ms(c.init)} | {_ms(c.init, 95)} | {_ms(c.total)} "
            f"| {_ms(c.total, 95)} | {err} | {left} |"
        )
    out += [
        "",
        "### First call after a reap (navigate + snapshot, pause until the worker is gone, "
        "`browser_click` on the ref taken before the pause)",
        "",
        "| path | n | `browser_click` p50 ms | max ms | failures | first ping after the answer, s (median / max) "
        "| GET stream reopened | note |",
        "|---|---:|---:|---:|---|---|---:|---|",
    ]
    for reap in (r.resumed, r.steady, r.direct_click):
        fail = f"{reap.failures} ({reap.first_failure})" if reap.failures else "0"
        if reap.ping_after or reap.no_ping:
            pings = (
                f"{statistics.median(reap.ping_after):.2f} / {max(reap.ping_after):.2f} "
                f"({statistics.median(reap.ping_since_sent):.2f} after the call was sent)"
                if reap.ping_after
                else "—"
            ) + (f"; none within {PING_WITHIN:.0f} s in {reap.no_ping}" if reap.no_ping else "")
            reopens = str(reap.get_reopens)
        else:
            pings = reopens = "—"
        out.append(
            f"| {reap.label} | {len(reap.calls)} | {_ms(reap.calls)} | {_ms(reap.calls, 100)} | {fail} | {pings} "
            f"| {reopens} | {reap.note} |"
        )
    return out + resume_tables(r)


def first_call_table(
    rows: list[FirstCallRow], heading: str = "First call after a warm `initialize` (`--warm-workers 1`"
) -> list[str]:
    out: list[str] = []
    if rows:
        out += [
            "",
            f"### {heading}; `browser_navigate`, then {STEADY_CALLS} more on the same session)",
            "",
            "| client | n | first call p50 ms | steady p50 ms | first ÷ steady | note |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for row in rows:
            ratio = f"{r:.2f}×" if (r := row.ratio()) is not None else "—"
            out.append(
                f"| {row.label} | {len(row.first)} | {_ms(row.first)} | {_ms(row.steady)} | {ratio} | {row.note} |"
            )
    return out


def resume_tables(r: HandshakeResults) -> list[str]:
    out: list[str] = []
    out += first_call_table(r.first_calls)
    resumed, once = r.resumed, r.at_once
    out += [
        "",
        "### Resumes (first call after the worker was reaped; the resume reserve readied first)",
        "",
        "| how | n | p50 ms | max ms | failures |",
        "|---|---:|---:|---:|---|",
        f"| one session at a time | {len(resumed.calls)} | {_ms(resumed.calls)} | {_ms(resumed.calls, 100)} "
        f"| {resumed.failures} |",
    ]
    if once is not None:
        out += [_at_once_row(row) for row in once.rows()]
    return out


def _at_once_row(once: AtOnceRow) -> str:
    fail = f"{once.failures} ({once.first_failure})" if once.failures else "0"
    return f"| {once.label} | {len(once.calls)} | {_ms(once.calls)} | {_ms(once.calls, 100)} | {fail} |"


def at_once_table(
    rows: list[AtOnceRow],
    heading: str = "Resumes at once (first call after the workers were reaped; the resume reserve readied first)",
) -> list[str]:
    """The `resumes` phase alone (sessions resuming at once), or any rows of resumes."""
    return ["### " + heading, "", "| how | n | p50 ms | max ms | failures |", "|---|---:|---:|---:|---|"] + [
        _at_once_row(once) for once in rows
    ]


def at_once_goals(once: AtOnce) -> list[Goal]:
    routed, direct = once.routed, once.direct
    notes = [f"{routed.failures} failed" if routed.failures else ""]
    if (floor := direct.p50_s()) is not None:
        notes.append(f"direct workers doing the same browser work at once (no router): {floor:.2f} s")
    return [
        Goal(
            f"resume p50, {routed.at_once} sessions at once ({routed.label.rsplit(', ', 1)[-1]})",
            routed.p50_s(),
            1.5,
            unit=" s",
            note="; ".join(filter(None, notes)),
        )
    ]


def goals(r: HandshakeResults) -> list[Goal]:
    """The resume goals: one session's first call after a reap, and sessions resuming at once."""
    resumed = r.resumed
    fails = f"; {resumed.failures} of {len(resumed.calls) + resumed.failures} failed" if resumed.failures else ""
    out = [
        Goal(
            "resume p50: first call after a reap, one session (Claude-Code-shaped client; goal for an idle machine)",
            pct(resumed.calls, 50) / 1000 if resumed.calls else None,
            0.8,
            unit=" s",
            note=f"direct worker's click: {_ms(r.direct_click.calls)} ms{fails}",
        )
    ]
    if r.at_once is not None:
        out += at_once_goals(r.at_once)
    return out
