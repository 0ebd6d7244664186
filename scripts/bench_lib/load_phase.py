"""The memory and throughput phases of scripts/bench: the router's RSS with idle sessions, each
browsing session's worker PSS, and many sessions calling at once (calls/s, latency, errors, and
the router's CPU per call)."""

from __future__ import annotations

import argparse
import asyncio

from bench_lib import measure as m
from bench_lib import report
from bench_lib.client import McpSession
from bench_lib.targets import Env, start_router


async def run(a: argparse.Namespace, env: Env, page: str) -> list[str]:
    out: list[str] = []
    mem_rows: list[m.MemoryRow] = []
    if "memory" in a.only:
        m.say(f"memory: idle (initialize-only) sessions {a.sessions} on a fresh router")
        # The router caps live workers at RAM / 600 MiB and hibernates the rest: lift the cap here.
        router = start_router(env, "router-idle", environ={"MCP_ROUTER_MAX_LIVE_WORKERS": str(max(a.sessions) + 10)})
        sessions: list[McpSession] = []
        try:
            for level in a.sessions:
                sessions += await m.open_sessions(router, level - len(sessions), None)
                await asyncio.sleep(1.0)
                mem_rows.append(m.memory_row(router, sessions, "idle (initialize only)"))
                m.say(f"  {level} idle sessions: router RSS {mem_rows[-1].router_rss_kib / 1024:.1f} MiB")
        finally:
            await m.close_sessions(sessions)
            env.registry.stop(router.child)

    if {"memory", "throughput"} & a.only:
        levels = sorted(
            set((a.browsing if "memory" in a.only else []) + ([a.concurrency] if "throughput" in a.only else []))
        )
        m.say(f"browsing sessions {levels} on a fresh router (each navigated: one Chromium per session)")
        router = start_router(env, "router-browse")
        sessions = []
        tp: m.ThroughputResult | None = None
        try:
            for level in levels:
                sessions += await m.open_sessions(router, level - len(sessions), page)
                await asyncio.sleep(1.0)
                mem_rows.append(m.memory_row(router, sessions, "browsing (navigated)"))
                m.say(f"  {level} browsing sessions: worker PSS {mem_rows[-1].worker_pss_kib / 1024:.0f} MiB")
            if "throughput" in a.only:
                await m.quiet("throughput")
                m.say(f"throughput: {len(sessions)} sessions × navigate+snapshot for {a.duration:.0f} s")
                tp = await m.throughput(sessions, page, a.duration, pid=router.child.pid)
        finally:
            await m.close_sessions(sessions)
            env.registry.stop(router.child)
        if tp is not None:
            out += [
                f"### Throughput (recording on): {tp.sessions} concurrent sessions, "
                "each `browser_navigate` + `browser_snapshot` in a loop",
                "",
                *report.throughput_table([tp]),
                "",
            ]
    if mem_rows:
        out += ["### Memory (router RSS; PSS of each worker's tree: node + Chromium)", ""]
        out += report.memory_table(mem_rows)
        out += [
            "",
            "Idle sessions never launch a browser (node only). PSS per session is the mean over up to 20 "
            "sessions of the whole tree of processes carrying that session's marker.",
            "",
        ]
    return out
