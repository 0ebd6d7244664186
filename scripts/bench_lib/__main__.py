"""scripts/bench: what a conversation feels through the router, against a Playwright worker used
directly (and supergateway): tool-call latency (routed ÷ direct, interleaved), handshakes,
resumes, the worker's start-up, the commit on a tool answer's path, memory and throughput. One
bounded run; prints Markdown with a goals table and writes .bench/latest.md."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from bench_lib import (
    aged,
    commit,
    conversation_phase,
    docs_page,
    handshakes,
    handshakes_report,
    handshakes_resume,
    latency_phase,
    left_behind,
    load_phase,
    node_start,
    report,
    shared_phases,
    spaced,
)
from bench_lib import measure as m
from bench_lib.latency_phase import DIRECT, NOREC, PATHS, REC, SG
from bench_lib.page import serve_page
from bench_lib.procs import Registry
from bench_lib.targets import (
    Env,
    ensure_supergateway,
    router_help,
    start_router,
    start_supergateway,
    start_worker,
    stop_workers,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PHASES = "latency,init,handshakes,conversation,node,commit,reserve,memory,throughput"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer iterations and sessions (~2–3 min)")
    p.add_argument("--iterations", type=int, help="interleaved rounds per tool and path (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed rounds first")
    p.add_argument("--reps", type=int, help="new conversations per initialize path (default 5)")
    p.add_argument("--sessions", help="idle-session levels for router RSS (default 1,10,50)")
    p.add_argument("--browsing", help="navigated-session levels for worker PSS (default 1,10)")
    p.add_argument("--concurrency", type=int, help="concurrent sessions in the throughput run (default 20)")
    p.add_argument("--duration", type=float, help="seconds of the throughput run (default 20)")
    p.add_argument("--warm-workers", type=int, default=2, help="pool size, if the router has --warm-workers")
    p.add_argument("--no-supergateway", dest="supergateway", action="store_false")
    p.add_argument("--supergateway-version", help="default: the installed one, else `npm view`")
    p.add_argument(
        "--only",
        default=DEFAULT_PHASES,
        help=f"phases to run, comma-separated (default {DEFAULT_PHASES}). Alone: `latency` ~5 min; "
        "`init` ~1 min; `handshakes` 1–2 min (Claude-Code-shaped handshakes, first calls, resumes); "
        "`conversation` ~1 min (a conversation resumed: its new session's first call); "
        "`node` ~30 s; `commit` ~10 s (in-process, no browser); `reserve` ~1.5 min (warm workers left after "
        "three abandoned sessions are reaped, default and `--resume-reserve 0`); `memory`, `throughput` "
        "~2 min together. "
        "Not in the default: `first-calls` (only the handshakes phase's first call after a warm initialize, "
        "~1 min); `resumes` (only its sessions resuming at once, ~1 min); `aged` (first calls and resumes "
        "after warm workers waited --aged-idle s, kept warm and not, ~8 min); `spaced` (the router's CPU per "
        "call with a call every --spaced-gap s, ~4 min); sessions sharing a browser (--shared-capacity per "
        "worker) against a worker each, ~7 min in all, written to their own part of docs/benchmarks.md: "
        "`shared-memory` (PSS of the router's tree with 1 and --shared-sessions sessions), `shared-left` "
        "(processes left once those are reaped and their host's idle timeout passed), `shared-resume` (a "
        "reaped session's first call, its host kept up), `shared-throughput` (--concurrency sessions at "
        "once); `shared`: all four",
    )
    p.add_argument("--shared-capacity", type=int, default=20, help="--sessions-per-browser of the shared phases")
    p.add_argument("--shared-sessions", type=int, default=8, help="sessions in shared-memory and shared-left")
    p.add_argument(
        "--shared-reps", type=int, help="resumes timed in shared-resume, client without capabilities (default 10)"
    )
    p.add_argument("--shared-cc-reps", type=int, default=3, help="and Claude-Code-shaped clients' (default 3)")
    p.add_argument(
        "--handshakes-at-once", type=int, default=20, help="concurrent Claude-Code-shaped handshakes (default 20)"
    )
    p.add_argument("--handshake-rounds", type=int, default=3, help="rounds of concurrent handshakes (default 3)")
    p.add_argument("--resume-at-once", type=int, default=10, help="sessions resuming at once (0: skip)")
    p.add_argument(
        "--resume-at-once-reserve", type=int, default=10,
        help="--resume-reserve of that router (memory for latency; 10: one per session coming back; "
        "the router's default is 1)",
    )
    p.add_argument(
        "--resume-bursts", type=int, default=handshakes_resume.RESUME_BURSTS,
        help=f"bursts of sessions resuming at once, pooled, each after the same burst on direct workers "
        f"(default {handshakes_resume.RESUME_BURSTS})",
    )
    p.add_argument("--aged-idle", type=float, default=aged.AGED_IDLE, help="seconds warm workers wait (`aged`)")
    p.add_argument("--aged-interval", type=float, help="--keep-warm-interval of the kept router in `aged`")
    p.add_argument("--aged-reps", type=int, default=5, help="conversations per router in `aged` (default 5)")
    p.add_argument("--spaced-gap", type=float, default=spaced.SPACED_GAP, help="seconds between calls (`spaced`)")
    p.add_argument("--spaced-reps", type=int, default=10, help="spaced calls of each kind (`spaced`, default 10)")
    p.add_argument(
        "--commit-calls", type=int, default=500, help="timed calls per answer kind and level in `commit` (default 500)"
    )
    p.add_argument("--node-reps", type=int, default=5, help="rounds of the worker's node start-up (0: skip)")
    p.add_argument("--v8-compile-cache", type=Path, help="v8-compile-cache.js: also time node with it")
    p.add_argument("--newer-node", type=Path, help="a newer node binary: also time it with NODE_COMPILE_CACHE")
    p.add_argument("--router-src", type=Path, help="run the router from this source tree (scratch copy)")
    p.add_argument("--router-arg", action="append", default=[], help="extra `mcp-router serve` flag (repeat)")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="'LABEL=SRC [FLAGS…]'",
        help="add a router to the latency rounds: source tree SRC ('-': the default) with extra flags",
    )
    p.add_argument(
        "--paths",
        default=",".join(PATHS),
        help=f"latency paths besides the variants (default {','.join(PATHS)}; direct is always measured)",
    )
    p.add_argument("--tools", default=",".join(m.TOOLS), help="tools timed in the latency rounds")
    p.add_argument("--click-every", type=int, default=4, help="time browser_click in every Nth round only")
    p.add_argument("--browser", default=None, help="Chromium path (default: as the router finds it)")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "latest.md")
    p.add_argument(
        "--update-docs", action="store_true", help="also write the report into docs/benchmarks.md, between its markers"
    )
    p.add_argument("--time-limit", type=float, default=1200, help="abort (and clean up) after this many seconds")
    a = p.parse_args(argv)
    q = a.quick
    a.iterations = a.iterations or (50 if q else 200)
    a.reps = a.reps or (3 if q else 5)
    a.sessions = [int(x) for x in (a.sessions or ("1,10,30" if q else "1,10,50")).split(",")]
    a.browsing = [int(x) for x in (a.browsing or ("1,5" if q else "1,10")).split(",")]
    a.concurrency = a.concurrency or (10 if q else 20)
    a.duration = a.duration or (8.0 if q else 20.0)
    a.shared_reps = a.shared_reps or (5 if q else 10)
    a.only = shared_phases.expand(set(a.only.split(",")))
    a.paths = set(a.paths.split(",")) | {DIRECT}
    a.tools = tuple(a.tools.split(","))
    return a


def with_goals(lines: list[str], goals: list[report.Goal], title: str = "Goals") -> list[str]:
    """A report's tables under the table of its goals."""
    if not goals:
        return lines
    return [
        f"### {title}",
        "",
        "| goal | measured | target | result | margin |",
        "|---|---:|---:|---|---|",
        *(g.row() for g in goals),
        "",
        *lines,
    ]


async def run(a: argparse.Namespace, env: Env, page: str) -> dict[str, list[str]]:
    """Each part of the report (docs_page.MAIN, docs_page.SHARED) that the phases run filled."""
    out: list[str] = []
    goals: list[report.Goal] = []
    sg_entry, sg_note = (None, "skipped (--no-supergateway)")
    if a.supergateway and SG in a.paths and {"latency", "init"} & a.only:
        sg_entry, sg_note = ensure_supergateway(a.supergateway_version)
        m.say(f"supergateway: {sg_note}")
    has_pool = "--warm-workers" in router_help(env)

    direct = rec = norec = sg = None
    if {"latency", "init"} & a.only:
        m.say("starting direct worker, routers (recording on/off)" + (", supergateway" if sg_entry else ""))
        direct = start_worker(env, DIRECT)
        rec = start_router(env, REC)
        norec = start_router(env, NOREC, "--no-record")
        sg = start_supergateway(env, sg_entry) if sg_entry else None

    if "latency" in a.only and direct and rec and norec:
        got = await latency_phase.run(a, env, page, latency_phase.Started(direct, rec, norec, sg), sg_note)
        out += got.lines
        goals += got.goals

    if "init" in a.only and direct and rec:
        rows: dict[str, m.InitResult] = {}
        await m.quiet("initialize")
        m.say(f"initialize: {a.reps} new conversations per path")
        r = rows["direct worker (already running)"] = m.InitResult()
        await m.repeat(a.reps, lambda: m.init_once(direct, page, r), "direct")
        cold = rows["direct worker, cold (spawn → ready → initialize)"] = m.InitResult(
            note="initialize includes node start-up; first call launches Chromium"
        )

        async def direct_cold() -> None:
            t0 = time.perf_counter()
            w = start_worker(env, "direct-cold")
            try:
                await m.init_once(w, page, cold, extra_s=time.perf_counter() - t0)
            finally:
                env.registry.stop(w.child)

        await m.repeat(a.reps, direct_cold, "direct cold")
        r_cold = rows["router, cold spawn"] = m.InitResult(note="spawns the worker; first call launches Chromium")
        await m.repeat(a.reps, lambda: m.init_once(rec, page, r_cold), "router cold")
        warm = rows[f"router, warm pool (`--warm-workers {a.warm_workers}`)"] = m.InitResult()
        if has_pool:
            pool = start_router(env, "router-pool", "--warm-workers", str(a.warm_workers))

            async def pooled() -> None:
                if not await m.wait_pool(pool, a.warm_workers):
                    warm.note = "pool did not fill within 40 s before some runs"
                # A worker just ready still opens its prepared session: an `initialize` 0.3 s
                # after the pool was full took 14 ms (median of 7), 3 s after, 5 ms.
                await m.quiet("warm pool")
                await m.init_once(pool, page, warm)

            await m.repeat(a.reps, pooled, "router warm pool")
            env.registry.stop(pool.child)
        else:
            warm.note = "skipped: this router has no `--warm-workers` flag yet"
        if sg:
            r_sg = rows["supergateway `--stateful` (process per session)"] = m.InitResult(
                note="spawns a worker per session; first call launches Chromium"
            )
            await m.repeat(a.reps, lambda: m.init_once(sg, page, r_sg), "supergateway")
        out += [f"### `initialize` and the first tool call (median of {a.reps} new conversations)", ""]
        out += [*report.init_table(rows), ""]
        d_init = m.med_ms(r.init)
        if warm.init:
            goals.append(
                report.Goal(
                    "warm-pool `initialize` ÷ direct `initialize`",
                    m.med_ms(warm.init) / d_init,
                    1.5,
                    note=f"{m.med_ms(warm.init):.1f} ms vs {d_init:.1f} ms",
                )
            )
        else:
            goals.append(report.Goal("warm-pool `initialize` ÷ direct `initialize`", None, 1.5, note="no warm pool"))

    for t in (rec, norec, sg):
        if t is not None:
            env.registry.stop(t.child)
    if direct is not None:
        stop_workers(env, [direct])

    if "handshakes" in a.only:
        resume = handshakes.ResumeOptions(a.resume_at_once, a.resume_at_once_reserve, a.resume_bursts)
        hs = await handshakes.measure(
            env, page, reps=a.reps, at_once=a.handshakes_at_once, rounds=a.handshake_rounds, resume=resume
        )
        out += [*handshakes_report.tables(hs), ""]
        goals += handshakes_report.goals(hs)

    if "node" in a.only and a.node_reps:
        await m.quiet("node")
        m.say(f"node: the worker's node start-up, {a.node_reps} rounds")
        starts = node_start.node_starts(env, a.node_reps, v8_compile_cache=a.v8_compile_cache, newer_node=a.newer_node)
        out += [*node_start.table(starts), ""]

    if "first-calls" in a.only and "handshakes" not in a.only:  # the handshakes phase has them
        m.say(f"first call after a warm initialize, {a.reps} conversations per client shape")
        firsts = await handshakes_resume.first_calls(env, page, a.reps)
        out += [*handshakes_report.first_call_table(firsts), ""]

    if "aged" in a.only:
        m.say(f"aged: first calls and resumes after warm workers waited {a.aged_idle:g} s, kept warm and not")
        firsts, resumes = await aged.aged(env, page, a.aged_reps, a.aged_idle, a.aged_interval)
        out += [*aged.tables(firsts, resumes, a.aged_idle), ""]

    if "spaced" in a.only:
        m.say(f"spaced: router CPU per call with a call every {a.spaced_gap:g} s, and back to back")
        spaced_rows = await spaced.spaced(env, page, a.spaced_reps, a.spaced_gap)
        out += [*spaced.table(spaced_rows, a.spaced_gap), ""]

    if "resumes" in a.only and "handshakes" not in a.only and a.resume_at_once:  # the handshakes phase has them
        m.say(f"{a.resume_at_once} sessions resuming at once, --resume-reserve {a.resume_at_once_reserve}")
        once = await handshakes_resume.resumes_at_once(
            env, page, a.resume_at_once, handshakes.REAP_IDLE, a.resume_at_once_reserve, a.resume_bursts
        )
        out += [*handshakes_report.at_once_table(once.rows()), ""]
        goals += handshakes_report.at_once_goals(once)

    if "conversation" in a.only:
        m.say(f"conversation: {a.reps} conversations resumed, each a new session's first call")
        resumed = await conversation_phase.measure(env, page, a.reps)
        out += conversation_phase.table(resumed)
        goals += conversation_phase.goals(resumed)

    if "commit" in a.only:
        await m.quiet("commit")
        m.say("commit: what a tool answer waits for before it leaves (its rows committed), in-process")
        out += [*commit.table(await commit.measure(calls=a.commit_calls, warmup=max(20, a.commit_calls // 10))), ""]

    if "reserve" in a.only:
        m.say(f"reserve: warm workers left {left_behind.AFTER_REAP:g} s after abandoned sessions are reaped")
        left = await left_behind.measure(env, page)
        out += [*left_behind.table(left), ""]
        goals += left_behind.goals(left)

    if {"memory", "throughput"} & a.only:
        out += await load_phase.run(a, env, page)

    parts = {docs_page.MAIN: with_goals(out, goals)}
    shared_lines, shared_goals = await shared_phases.run(a, env, page)
    parts[docs_page.SHARED] = with_goals(shared_lines, shared_goals, "Goals of sessions sharing a browser")
    return {part: lines for part, lines in parts.items() if lines}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(sig, interrupt)
    signal.alarm(int(a.time_limit))
    from router.settings import find_browser

    work = Path(tempfile.mkdtemp(prefix="mcp-router-bench-"))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    registry = Registry()
    env = Env(
        root=ROOT,
        work=work,
        logs=a.out.parent / "logs",
        browser=a.browser or find_browser() or "chromium",
        cli=ROOT / "workers" / "node_modules" / "@playwright" / "mcp" / "cli.js",
        registry=registry,
        router_src=a.router_src.resolve() if a.router_src else None,
        router_args=a.router_arg,
    )
    shutil.rmtree(env.logs, ignore_errors=True)
    started = time.perf_counter()
    load_start = report.load_average()
    status = 0
    try:
        with serve_page() as base:
            parts = asyncio.run(run(a, env, base + "/"))
    except KeyboardInterrupt as exc:
        print(f"bench: interrupted ({exc}); cleaning up", file=sys.stderr)
        return 130
    finally:
        signal.alarm(0)
        left = registry.stop_all()
        if left:
            print(f"bench: WARNING: processes still alive after clean-up: {left}", file=sys.stderr)
            status = 1
        shutil.rmtree(work, ignore_errors=True)
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    command = "scripts/bench " + shlex.join(sys.argv[1:]) if sys.argv[1:] else "scripts/bench"
    head = [
        f"Measured {when} on {report.machine()}; `{command.strip()}` "
        f"({time.perf_counter() - started:.0f} s), test page served on 127.0.0.1; load average (1, 5, 15 min) "
        f"at start {load_start}, at end {report.load_average()}.",
    ]
    serve = shlex.join(["mcp-router", "serve", *a.router_arg])
    body = [line for lines in parts.values() for line in lines]
    text = "\n".join([*head, f"Router: {docs_page.router_source(a.router_src)}; `{serve}`.", "", *body]) + "\n"
    print(text)
    a.out.write_text(text)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    (a.out.parent / f"bench-{stamp}.md").write_text(text)
    (a.out.parent / "last-args.json").write_text(json.dumps(sys.argv[1:]))
    if a.update_docs:
        router = f"Router: {docs_page.router_source(a.router_src, commit=False)}; `{serve}`."
        for part, lines in parts.items():
            docs_page.update("\n".join([*head, router, "", *lines]), part=part)
        print(f"bench: wrote {docs_page.PAGE} ({', '.join(parts)})", file=sys.stderr)
    print(f"bench: wrote {a.out}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
