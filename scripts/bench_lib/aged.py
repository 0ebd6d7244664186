"""The first call of a conversation that comes to a warm worker after it waited minutes, as
Claude Code comes back to a new conversation or after a pause (`--only aged`, ~7 min, not in the
default phases). Two routers side by side, interleaved: one keeping its waiting workers warm (the
default, a snapshot every 30 s) and one with ``--keep-warm-interval 0``."""

from __future__ import annotations

import asyncio
from typing import Final

from bench_lib.handshakes_report import first_call_table
from bench_lib.handshakes_resume import FirstCallRow, cc_conversation
from bench_lib.measure import pct, quiet, say, wait_pool
from bench_lib.procs import tree_cpu_seconds
from bench_lib.report import Goal
from bench_lib.targets import Env, start_router

AGED_IDLE: Final = 300.0  # seconds a warm worker waits (at 180 s the first call had not slowed yet)
READY_EACH: Final = 40.0  # a warm worker's spawn and browser launch, on a loaded machine


async def aged_first_calls(
    env: Env, page: str, reps: int, idle: float = AGED_IDLE, interval: float | None = None
) -> list[FirstCallRow]:
    """``reps`` warm workers per router wait ``idle`` s; then each takes one Claude-Code-shaped
    conversation in turn, the routers alternating, each once both pools are full again and the
    machine is quiet. While they wait, the
    CPU of each router's whole tree (router, node, Chromium) is read: what keeping warm costs."""
    every = [] if interval is None else ["--keep-warm-interval", f"{interval:g}"]
    kept = FirstCallRow(f"kept warm (a snapshot every {interval:g} s)" if every else "kept warm (the default, 30 s)")
    cold = FirstCallRow("`--keep-warm-interval 0`")
    routers = [
        (kept, start_router(env, "router-aged-kept", "--warm-workers", str(reps), *every)),
        (cold, start_router(env, "router-aged-cold", "--warm-workers", str(reps), "--keep-warm-interval", "0")),
    ]
    try:
        for _, router in routers:
            await wait_pool(router, 1, within=READY_EACH)
            await cc_conversation(router, page, None)  # untimed: the pool learns the client's shape
        for _, router in routers:
            await wait_pool(router, reps, within=READY_EACH * reps)
        say(f"aged: {reps} warm workers per router wait {idle:.0f} s")
        before = [tree_cpu_seconds(r.child.pid, r.state_dir) for _, r in routers]
        await asyncio.sleep(idle)  # what is measured: a worker that waited this long
        after = [tree_cpu_seconds(r.child.pid, r.state_dir) for _, r in routers]
        for (row, _), cpu0, cpu1 in zip(routers, before, after, strict=True):
            row.note = f"while waiting: {(cpu1 - cpu0) * 1000 / idle / reps:.1f} ms of CPU a second per warm worker"
        for k in range(reps):
            for row, router in routers:
                # Each take refills its pool (a spawn and a browser launch, 3 s later): measured on
                # a machine where both pools are full again, the oldest workers are taken first.
                for _, each in routers:
                    await wait_pool(each, reps, within=READY_EACH)
                await quiet("aged first call")
                await cc_conversation(router, page, row)
            say(f"  first call after {idle:.0f} s of waiting {k + 1}/{reps}")
    finally:
        for _, router in routers:
            env.registry.stop(router.child)
    return [kept, cold]


def table(rows: list[FirstCallRow], idle: float) -> list[str]:
    for row in rows:
        row.note = f"each: {', '.join(f'{r:.2f}' for r in row.each())}; {row.note}"
    return first_call_table(rows, f"First call after a warm worker waited {idle:.0f} s (Claude-Code-shaped")


def goals(rows: list[FirstCallRow], idle: float) -> list[Goal]:
    kept, cold = rows
    note = f"{pct(kept.first, 50):.1f} ms vs {pct(kept.steady, 50):.1f} ms" if kept.first and kept.steady else ""
    if (ratio := cold.ratio()) is not None:
        note += f"; not kept warm: {ratio:.2f}×"
    return [Goal(f"first call after a warm worker waited {idle:.0f} s ÷ steady call", kept.ratio(), 1.2, note=note)]
