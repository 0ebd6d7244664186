"""The memory and throughput phases of scripts/bench: the router's RSS with idle sessions, each
browsing session's worker PSS, and many sessions calling at once (calls/s, latency, errors, and
the router's CPU per call against its goal)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Final

import httpx
from bench_lib import load_floor, profile, report
from bench_lib import measure as m
from bench_lib.client import McpSession
from bench_lib.procs import rss_kib
from bench_lib.targets import Env, Target, start_router

ANSWERS_WAITED: Final = "mcp_router_recorder_answers_waited"


async def run(a: argparse.Namespace, env: Env, page: str, floor: str) -> tuple[list[str], list[report.Goal]]:
    """``floor`` notes the CPU goal's row with what a bare relay costs (floor_note)."""
    out: list[str] = []
    goals: list[report.Goal] = []
    mem_rows: list[m.MemoryRow] = []
    if "memory" in a.only:
        m.say(f"memory: idle (initialize-only) sessions {a.sessions} on a fresh router")
        # The router caps live workers at RAM / 600 MiB and hibernates the rest: lift the cap here.
        router = start_router(env, "router-idle", environ={"MCP_ROUTER_MAX_LIVE_WORKERS": str(max(a.sessions) + 10)})
        sessions: list[McpSession] = []
        base_rss = rss_kib(router.child.pid)
        try:
            for level in a.sessions:
                sessions += await m.open_sessions(router, level - len(sessions), None)
                await asyncio.sleep(1.0)
                mem_rows.append(m.memory_row(router, sessions, "idle (initialize only)"))
                m.say(f"  {level} idle sessions: router RSS {mem_rows[-1].router_rss_kib / 1024:.1f} MiB")
        finally:
            await m.close_sessions(sessions)
            env.registry.stop(router.child)
        first, last = mem_rows[0], mem_rows[-1]
        growth = (last.router_rss_kib - first.router_rss_kib) / 1024 / max(1, last.sessions - first.sessions)
        goals.append(
            report.Goal(
                f"router RSS growth per idle session ({first.sessions}→{last.sessions})",
                growth,
                1.0,
                unit=" MiB",
                note=f"RSS with 0 sessions: {base_rss / 1024:.1f} MiB",
            )
        )

    if {"memory", "throughput"} & a.only:
        levels = (a.browsing if "memory" in a.only else []) + ([a.concurrency] if "throughput" in a.only else [])
        m.say(f"browsing sessions {levels} on a fresh router (each navigated: one Chromium per session)")
        router = start_router(env, "router-browse")
        sessions = []
        tp: m.ThroughputResult | None = None
        waited0 = waited = None
        try:
            for level in sorted(set(levels)):
                sessions += await m.open_sessions(router, level - len(sessions), page)
                await asyncio.sleep(1.0)
                mem_rows.append(m.memory_row(router, sessions, "browsing (navigated)"))
                m.say(f"  {level} browsing sessions: worker PSS {mem_rows[-1].worker_pss_kib / 1024:.0f} MiB")
            if "throughput" in a.only:
                await m.quiet("throughput")
                m.say(f"throughput: {len(sessions)} sessions × navigate+snapshot for {a.duration:.0f} s")
                raw_tp = a.out.parent / "profile-throughput.txt"
                spy = profile.start(router.child.pid, raw_tp) if a.profile else None
                waited0 = await router_metric(router, ANSWERS_WAITED)
                tp = await m.throughput(sessions, page, a.duration, pid=router.child.pid)
                waited = await router_metric(router, ANSWERS_WAITED)
                if spy is not None:
                    profile.stop(spy)
                    out += [f"### Router profile (py-spy, throughput run at {tp.sessions} sessions)", ""]
                    out += [*profile.summary(raw_tp, tp.calls, what="navigate/snapshot calls"), ""]
        finally:
            await m.close_sessions(sessions)
            env.registry.stop(router.child)
        if tp is not None:
            # After the router's sessions are gone: the floor's own workers take their cores.
            floors = await load_floor.measure(env, page, tp.sessions, a.duration) if a.throughput_floor else []
            out += [
                f"### Throughput (recording on): {tp.sessions} concurrent sessions, "
                "each `browser_navigate` + `browser_snapshot` in a loop",
                "",
                "Through the router, then (unless `--no-throughput-floor`) through one process relaying "
                "to as many direct workers, the same loop: what the hop alone costs one process at this load.",
                "",
            ]
            out += [*report.throughput_table([("the router", tp), *((f.label, f.result) for f in floors)]), ""]
            if waited0 is not None and waited is not None:
                out += [
                    f"Tool answers that waited for a commit (the write-ahead file not taking their rows): "
                    f"{waited - waited0:.0f} of {tp.calls}.",
                    "",
                ]
            goals.append(report.Goal(f"errors at {tp.sessions} concurrent sessions", tp.errors, 0, unit=""))
            if tp.cpu_ms_per_call is not None:
                at_load = [f"{f.label.split(' (')[0]} {f.result.cpu_ms_per_call:.2f} ms" for f in floors
                           if f.result.cpu_ms_per_call is not None]  # fmt: skip
                here = f"at {tp.sessions} sessions, the same loop: " + ", ".join(at_load) if at_load else ""
                note = "; ".join(part for part in (floor, here) if part)
                goals.append(
                    report.Goal(
                        f"router CPU per call at {tp.sessions} concurrent sessions",
                        tp.cpu_ms_per_call,
                        0.3,
                        unit=" ms",
                        note=note,
                    )
                )
    if mem_rows:
        out += ["### Memory (router RSS; PSS of each worker's tree: node + Chromium)", ""]
        out += report.memory_table(mem_rows)
        out += [
            "",
            "Idle sessions never launch a browser (node only). PSS per session is the mean over up to 20 "
            "sessions of the whole tree of processes carrying that session's marker.",
            "",
        ]
    return out, goals


async def router_metric(router: Target, name: str) -> float | None:
    """One unlabelled value of the router's /metrics; None when it has no such metric (an older
    tree) or does not answer."""
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            answer = await client.get(f"{router.endpoint.base}/metrics", headers=router.endpoint.headers())
    except httpx.HTTPError:
        return None
    for line in answer.text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def floor_note(in_a_loop: float | None, in_situ: float | None, native: float | None = None) -> str:
    """The floor under the CPU goal: a Python relay without ASGI (raw_relay.py, the cheapest the
    floor has; else the uvicorn one) with one commit per call, in a loop and where
    the router runs (in front of a real worker); and nginx relaying, nothing else, where the
    router runs: what native code costs for the hop alone."""
    notes = []
    if in_situ is not None:
        notes.append(f"in the latency rounds {in_situ:.2f} ms")
    if in_a_loop is not None:
        notes.append(f"in a loop {in_a_loop:.2f} ms")
    note = "floor (a Python relay without ASGI + one commit per call): " + ", ".join(notes) if notes else ""
    if native is not None:
        note += ("; " if note else "") + f"nginx relaying, nothing else, in the latency rounds: {native:.2f} ms"
    return note
