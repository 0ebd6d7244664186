"""The `reserve` phase: what conversations abandoned without a DELETE leave running. Three
Claude-Code-shaped conversations open a page and go (streams dropped, no DELETE: Claude Code never
sends one); the router reaps their workers; AFTER_REAP seconds after the last reap, the workers
still running under the router's state dir are counted (by the marker each carries: the resume
reserve's warm workers), for the router's default and for ``--resume-reserve 0``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final

from bench_lib.cc_client import CcSession
from bench_lib.handshakes import REAP_IDLE, open_page, wait_reaped
from bench_lib.measure import failure, say
from bench_lib.procs import chromium_count
from bench_lib.report import Goal
from bench_lib.targets import Env, healthz, start_router

from workers.orphans import processes_for, running_workers

ABANDONED: Final = 3
AFTER_REAP: Final = 20.0  # seconds: the reserve fills in 2-5 s a worker; it would have grown by then
# The goal per mode: the default holds at most one warm worker, --resume-reserve 0 none.
MODES: Final = (("the default", (), 1), ("`--resume-reserve 0`", ("--resume-reserve", "0"), 0))


@dataclass
class LeftRow:
    label: str
    limit: int
    abandoned: int  # sessions opened, dropped and reaped before the count
    workers: int  # worker ids with a process running
    browsers: int  # Chromium main processes
    processes: int  # every process of theirs (node, Chromium and its helpers)
    reserve: object  # what /healthz calls the reserve (None from a router that does not say)
    unopened: list[str] = field(default_factory=list)  # sessions that did not find the page: why


async def left_after_reap(
    env: Env, page: str, label: str, flags: tuple[str, ...], limit: int, abandoned: int = ABANDONED
) -> LeftRow:
    """What runs under the router's state dir AFTER_REAP s after ``abandoned`` sessions that
    opened the page were dropped and reaped (its --idle-timeout REAP_IDLE, also an empty shared
    host's lifetime)."""
    name = "router-left" + "-".join(flags).replace("--", "-")
    router = start_router(env, name, "--idle-timeout", f"{REAP_IDLE:g}", *flags)
    try:
        sessions = [CcSession(router.endpoint) for _ in range(abandoned)]
        try:  # each is reaped alike, whether it found its page or not: told, not fatal
            opened = await asyncio.gather(*(open_page(cc, page) for cc in sessions), return_exceptions=True)
        finally:
            for cc in sessions:
                await cc.close()  # as Claude Code goes: no DELETE
        for cc in sessions:
            await wait_reaped(router, cc.session_id or "")
        say(f"reserve ({label}): {abandoned} sessions reaped; counting {AFTER_REAP:g} s later")
        await asyncio.sleep(AFTER_REAP)
        state = router.state_dir
        return LeftRow(
            label, limit, abandoned, len(running_workers(state)), chromium_count(state), len(processes_for(state)),
            healthz(router).get("reserve"), [failure(r) for r in opened if isinstance(r, Exception)],
        )  # fmt: skip
    finally:
        env.registry.stop(router.child)


async def measure(env: Env, page: str) -> list[LeftRow]:
    return [await left_after_reap(env, page, label, flags, limit) for label, flags, limit in MODES]


def table(rows: list[LeftRow], workers: str = "warm workers") -> list[str]:
    """``workers``: what the running worker ids are, in the router measured."""
    counts = sorted({r.abandoned for r in rows})
    out = [
        f"### Left running {AFTER_REAP:g} s after {'/'.join(map(str, counts))} abandoned sessions are reaped "
        "(Claude-Code-shaped: a page opened, streams dropped, no DELETE)",
        "",
        f"| router | {workers} | Chromium | processes | `/healthz` reserve |",
        "|---|---:|---:|---:|---:|",
    ]
    out += [f"| {r.label} | {r.workers} | {r.browsers} | {r.processes} | {r.reserve} |" for r in rows]
    out += [f"\n{r.label}: {len(r.unopened)} of {r.abandoned} sessions did not find the page ({r.unopened[0]})"
            for r in rows if r.unopened]  # fmt: skip
    return out


def goals(rows: list[LeftRow]) -> list[Goal]:
    out = []
    for r in rows:
        name = f"warm workers left {AFTER_REAP:g} s after {r.abandoned} abandoned sessions are reaped ({r.label})"
        out.append(Goal(name, r.workers, r.limit, "", f"{r.browsers} Chromium, {r.processes} processes"))
    return out
