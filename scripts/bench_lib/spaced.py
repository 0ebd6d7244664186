"""The router's CPU per call in Claude Code's rhythm (`--only spaced`, ~4 min, not in the default
phases): one Claude-Code-shaped session making a call every few seconds, as a conversation does
between a model's turns, against the same calls back to back: whether caches gone cold between
turns, or state saves that a burst of calls would share, make a conversation's calls dearer."""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass, field
from typing import Final

from bench_lib.cc_client import CcSession
from bench_lib.handshakes import open_page
from bench_lib.measure import quiet, say
from bench_lib.procs import cpu_seconds_fine
from bench_lib.targets import Env, start_router

SPACED_GAP: Final = 4.0  # a model's turn, under the 60-s idle timeout; a navigation's save (0.5 s after) lands in it
BACK_TO_BACK: Final = 200  # calls of the steady loop the spaced calls are set against
# What is timed, in turn: a read-only call, one that moves the page and one that changes nothing
# though it may (a state save follows both, 0.5 s later, inside the gap), and no call at all (the
# router's idle rate over a gap).
KINDS: Final = ("browser_snapshot", "browser_navigate", "browser_press_key", None)
ARGUMENTS: Final = {"browser_press_key": {"key": "Shift"}}


@dataclass
class SpacedRow:
    tool: str
    spaced_ms: list[float] = field(default_factory=list)  # router CPU per gap with this call, net of idle
    steady_ms: float | None = None  # router CPU per call, back to back


async def spaced(env: Env, page: str, reps: int, gap: float = SPACED_GAP) -> list[SpacedRow]:
    router = start_router(env, "router-spaced")
    pid = router.child.pid
    cc = CcSession(router.endpoint)
    rows = {kind: SpacedRow(kind) for kind in KINDS if kind is not None}
    idle: list[float] = []
    try:
        await open_page(cc, page)
        await asyncio.sleep(gap)  # the opening navigation's save is over
        for k in range(reps):
            for kind in KINDS:
                await quiet("spaced call")
                before = cpu_seconds_fine(pid)
                if kind is not None:
                    await cc.call(kind, **_arguments(kind, page))
                await asyncio.sleep(gap)
                used = (cpu_seconds_fine(pid) - before) * 1000
                (idle if kind is None else rows[kind].spaced_ms).append(used)
            say(f"  spaced calls {k + 1}/{reps}")
        rest = statistics.median(idle)
        for row in rows.values():
            row.spaced_ms = [ms - rest for ms in row.spaced_ms]
            await quiet("back to back")
            before = cpu_seconds_fine(pid)
            for _ in range(BACK_TO_BACK):
                await cc.call(row.tool, **_arguments(row.tool, page))
            row.steady_ms = (cpu_seconds_fine(pid) - before) * 1000 / BACK_TO_BACK
    finally:
        await cc.close()
        env.registry.stop(router.child)
    return list(rows.values())


def _arguments(tool: str, page: str) -> dict[str, str]:
    return {"url": page} if tool == "browser_navigate" else ARGUMENTS.get(tool, {})


def table(rows: list[SpacedRow], gap: float) -> list[str]:
    out = [
        f"### Router CPU per call in Claude Code's rhythm (one Claude-Code-shaped session, a call every {gap:g} s, "
        "net of the router's idle rate; against the same call back to back)",
        "",
        "| call | n | spaced: CPU ms per call (median) | min | max | back to back: CPU ms per call | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        p50 = statistics.median(row.spaced_ms)
        ratio = f"{p50 / row.steady_ms:.1f}×" if row.steady_ms else "—"
        steady = f"{row.steady_ms:.2f}" if row.steady_ms is not None else "—"
        out.append(
            f"| `{row.tool}` | {len(row.spaced_ms)} | {p50:.2f} | {min(row.spaced_ms):.2f} | {max(row.spaced_ms):.2f} "
            f"| {steady} | {ratio} |"
        )
    return out
