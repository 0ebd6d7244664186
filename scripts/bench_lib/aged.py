"""What a conversation waits for when the warm worker it takes waited minutes, as Claude Code's do:
a new conversation's first call, and a resume after a pause (`--only aged`, ~8 min, not in the
default phases). Two routers side by side, interleaved: one keeping its waiting workers warm (the
default, a snapshot every 30 s) and one with ``--keep-warm-interval 0``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

import httpx
from bench_lib.cc_client import CcSession
from bench_lib.client import CallError
from bench_lib.handshakes import CLICK, REAP_IDLE, open_page, wait_reaped
from bench_lib.handshakes_report import at_once_table, first_call_table
from bench_lib.handshakes_resume import AtOnceRow, FirstCallRow, cc_conversation
from bench_lib.measure import quiet, say, wait_pool
from bench_lib.procs import tree_cpu_seconds
from bench_lib.targets import Env, Target, start_router

from router.types import ACTION_HEADER

AGED_IDLE: Final = 300.0  # seconds a warm worker waits (at 180 s the first call had not slowed yet)
READY_EACH: Final = 40.0  # a warm worker's spawn and browser launch, on a loaded machine


@dataclass
class _Side:
    """One router of the two, its rows, and its sessions asleep."""

    router: Target
    first: FirstCallRow
    resumed: AtOnceRow
    sleepers: list[tuple[CcSession, str]]  # a session asleep and the ref it will click

    def expected_pool(self, reps: int, resumed: int) -> int:
        """Its warm workers, plus the reserve's one per session still asleep."""
        return reps + reps - resumed


async def aged(
    env: Env, page: str, reps: int, idle: float = AGED_IDLE, interval: float | None = None
) -> tuple[list[FirstCallRow], list[AtOnceRow]]:
    """Per router: ``reps`` Claude-Code-shaped sessions open a page and sleep (reaped after
    REAP_IDLE s; the resume reserve readies a worker for each), and ``reps`` warm workers wait
    besides. All wait ``idle`` s, the CPU of each router's whole tree (router, node, Chromium)
    read meanwhile: what keeping warm costs. Then, ``reps`` times: a new conversation's first call
    on each router in turn, then one sleeper's click on its old ref on each; each once both pools
    are full again (a first call's take refills its pool 3 s later) and the machine is quiet."""
    every = [] if interval is None else ["--keep-warm-interval", f"{interval:g}"]
    label = f"kept warm (a snapshot every {interval:g} s)" if every else "kept warm (the default, 30 s)"
    flags = ["--warm-workers", str(reps), "--idle-timeout", f"{REAP_IDLE:g}", "--resume-reserve", str(reps)]
    sides = [
        _Side(start_router(env, "router-aged-kept", *flags, *every), FirstCallRow(label), AtOnceRow(label, 1), []),
        _Side(
            start_router(env, "router-aged-cold", *flags, "--keep-warm-interval", "0"),
            FirstCallRow("`--keep-warm-interval 0`"),
            AtOnceRow("`--keep-warm-interval 0`", 1),
            [],
        ),
    ]
    try:
        for side in sides:
            for _ in range(reps):
                cc = CcSession(side.router.endpoint)
                side.sleepers.append((cc, await open_page(cc, page)))
            # Untimed: the pool learns the client's shape.
            await _end(side.router, await cc_conversation(side.router, page, None))
        for side in sides:
            for cc, _ in side.sleepers:
                await wait_reaped(side.router, cc.session_id or "")
        for side in sides:
            await wait_pool(side.router, side.expected_pool(reps, 0), within=READY_EACH * 2 * reps)
        say(f"aged: {2 * reps} warm workers per router ({reps} of them the resume reserve) wait {idle:.0f} s")
        before = [tree_cpu_seconds(side.router.child.pid, side.router.state_dir) for side in sides]
        await asyncio.sleep(idle)  # what is measured: a worker that waited this long
        for side, cpu0 in zip(sides, before, strict=True):
            cpu = tree_cpu_seconds(side.router.child.pid, side.router.state_dir) - cpu0
            side.first.note = f"while waiting: {cpu * 1000 / idle / (2 * reps):.1f} ms of CPU a second per warm worker"
        for k in range(reps):
            for side in sides:
                await _settled(sides, reps)
                await _end(side.router, await cc_conversation(side.router, page, side.first))
            for side in sides:
                await _settled(sides, reps)
                await _resume(side, k)
            say(f"  first call and resume after {idle:.0f} s of waiting {k + 1}/{reps}")
    finally:
        await asyncio.gather(*(cc.close() for side in sides for cc, _ in side.sleepers))
        for side in sides:
            env.registry.stop(side.router.child)
    return [side.first for side in sides], [side.resumed for side in sides]


async def _settled(sides: list[_Side], reps: int) -> None:
    for side in sides:
        resumed = len(side.resumed.calls) + side.resumed.failures
        await wait_pool(side.router, side.expected_pool(reps, resumed), within=READY_EACH)
    await quiet("aged call")


async def _resume(side: _Side, k: int) -> None:
    cc, ref = side.sleepers[k]
    try:
        _, dt = await cc.call("browser_click", element=CLICK, target=ref)
        side.resumed.calls.append(dt)
    except CallError as exc:
        side.resumed.failures += 1
        side.resumed.first_failure = side.resumed.first_failure or str(exc)[:200]
    await cc.close()
    await _end(side.router, cc.session_id or "")


async def _end(router: Target, session_id: str) -> None:
    """Ends a measured session before it is reaped (REAP_IDLE s): asleep, it would have the
    reserve ready one more worker, a spawn in the middle of the next measurement."""
    headers = {**router.endpoint.headers(), ACTION_HEADER: "1"}
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        response = await http.post(f"{router.endpoint.base}/api/sessions/{session_id}/end", headers=headers)
        response.raise_for_status()


def tables(firsts: list[FirstCallRow], resumes: list[AtOnceRow], idle: float) -> list[str]:
    for row in firsts:
        row.note = "; ".join(filter(None, [f"each: {', '.join(f'{r:.2f}' for r in row.each())}", row.note]))
    return [
        *first_call_table(firsts, f"First call after a warm worker waited {idle:.0f} s (Claude-Code-shaped"),
        "",
        *at_once_table(resumes, f"Resume after the reserve's worker waited {idle:.0f} s (`browser_click` on the ref "
                       f"taken before the pause; Claude-Code-shaped)"),
    ]
