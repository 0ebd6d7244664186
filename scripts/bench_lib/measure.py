"""The measurements: interleaved tool-call latency, initialize/first call, memory, throughput."""

from __future__ import annotations

import asyncio
import random
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_lib.client import CallError, McpSession, new_http
from bench_lib.procs import chromium_count, cpu_seconds, cpu_seconds_fine, machine_busy_jiffies, pss_kib, rss_kib
from bench_lib.targets import Target, healthz

from router.record.snapshots import SNAPSHOT_LINK
from workers.orphans import processes_for

TOOLS = ("browser_snapshot", "browser_tabs", "browser_click")
# A timed phase starts once the machine is this quiet over one window: the last phase's processes
# (Chromium's exit, a pool's refill) would otherwise be measured as the next phase's router.
QUIET_BUSY_SHARE = 0.2
QUIET_WINDOW_S = 0.5
QUIET_WITHIN_S = 30.0
ORDER_SEED = 20261128  # the latency rounds' orders: the same from run to run
IDLE_WINDOW_S = 4.0  # a router's idle CPU rate, measured with the same sessions open
# After a click the button is focused: `button "Press me" [active] [ref=e5]`.
BUTTON = re.compile(r'button "Press me"(?: \[[a-z]+\])* \[ref=(\w+)\]')


def say(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def failure(exc: BaseException) -> str:
    """An error as a report shows it: its type and the start of its message, on one line (it
    lands in a table cell or a list item)."""
    return f"{type(exc).__name__}: {str(exc)[:200]}".replace("\n", "⏎")


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of seconds, in ms."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k] * 1000


def med_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def open_page(session: McpSession, page: str) -> str:
    """Initialize, load the test page, and find the button's ref."""
    await session.initialize()
    await session.call("browser_navigate", url=page)
    text, _ = await session.call("browser_snapshot")
    return button_ref(text, session.endpoint.name)


def button_ref(text: str, who: str) -> str:
    """The test page's button's ref in an answer's snapshot, inline or in the file it links (a
    navigation's); CallError naming ``who`` when there is none."""
    found = BUTTON.search(text)
    if found is None and (link := SNAPSHOT_LINK.search(text)) is not None:
        found = BUTTON.search(Path(link.group("path")).read_text())
    if found is None:
        raise CallError(f"{who}: no button in the answer: {text[:300]}")
    return found.group(1)


def tool_args(tool: str, ref: str) -> dict[str, Any]:
    if tool == "browser_tabs":
        return {"action": "list"}
    if tool == "browser_click":
        return {"element": "Press me button", "target": ref}
    return {}


# -- 1. tool-call latency ---------------------------------------------------------------------------


@dataclass
class LatencyResult:
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # target → tool → seconds
    cpu_ms_per_call: dict[str, float] = field(default_factory=dict)  # routers → CPU ms per call


async def latency(
    targets: list[Target],
    routers: dict[str, Target],
    page: str,
    *,
    iterations: int,
    warmup: int,
    tools: tuple[str, ...] = TOOLS,
    click_every: int = 4,
) -> LatencyResult:
    """Same client style for all (one keep-alive connection each); rounds interleaved, each tool's
    in an order of its own (seeded): with the order only rotated, a path always came right after
    the same other one, and so always met what that one's call left running."""
    sessions, refs = [], {}
    for t in targets:
        s = McpSession(t.endpoint, new_http(1))
        refs[t.endpoint.name] = await open_page(s, page)
        sessions.append(s)
    result = LatencyResult({s.endpoint.name: {tool: [] for tool in tools} for s in sessions})
    try:
        for _ in range(warmup):
            for s in sessions:
                for tool in tools:
                    await s.call(tool, **tool_args(tool, refs[s.endpoint.name]))
        await quiet("latency")  # background work after the warm-up (state saving) is not measured
        # The idle rate is subtracted over the whole run (~1-2 min): measured in clock ticks over
        # two seconds, its error alone was up to ~0.8 ms per call.
        cpu0 = {name: cpu_seconds_fine(r.child.pid) for name, r in routers.items()}
        await asyncio.sleep(IDLE_WINDOW_S)
        idle_rate = {
            name: (cpu_seconds_fine(r.child.pid) - cpu0[name]) / IDLE_WINDOW_S for name, r in routers.items()
        }
        cpu0 = {name: cpu_seconds(r.child.pid) for name, r in routers.items()}
        shuffled = random.Random(ORDER_SEED)
        t0 = time.perf_counter()
        for i in range(iterations):
            for tool in tools:
                order = shuffled.sample(sessions, len(sessions))
                if tool == "browser_click" and i % click_every:
                    continue  # ~0.55 s each (the worker waits for the page to settle): timed every Nth round
                for s in order:
                    _, dt = await s.call(tool, **tool_args(tool, refs[s.endpoint.name]))
                    result.samples[s.endpoint.name][tool].append(dt)
            if (i + 1) % max(1, iterations // 5) == 0:
                say(f"  latency round {i + 1}/{iterations}")
        wall = time.perf_counter() - t0
        for name, r in routers.items():
            used = cpu_seconds(r.child.pid) - cpu0[name] - idle_rate[name] * wall
            calls = sum(len(v) for v in result.samples[name].values())
            result.cpu_ms_per_call[name] = used * 1000 / calls
    finally:
        for s in sessions:
            await s.delete()
            await s.http.aclose()
    return result


# -- 2. initialize and first tool call --------------------------------------------------------------


@dataclass
class InitResult:
    init: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    steady: list[float] = field(default_factory=list)
    note: str = ""


async def init_once(target: Target, page: str, result: InitResult, *, extra_s: float = 0.0, steady: int = 3) -> None:
    """A new conversation: initialize, first browser_navigate, then steady-state navigates."""
    s = McpSession(target.endpoint, new_http(1))
    try:
        result.init.append(await s.initialize() + extra_s)
        _, dt = await s.call("browser_navigate", url=page)
        result.first.append(dt)
        for k in range(steady):
            _, dt = await s.call("browser_navigate", url=f"{page}?n={k}")
            result.steady.append(dt)
    finally:
        await s.delete()
        await s.http.aclose()


async def wait_pool(target: Target, size: int, within: float = 40.0) -> bool:
    """Until the router reports `size` warm workers ready (`/healthz` "warm_workers"; older routers:
    `size` live workers and as many browsers under its state dir)."""
    end = time.perf_counter() + within
    while time.perf_counter() < end:
        health = healthz(target)
        warm, workers = health.get("warm_workers"), health.get("workers", 0)
        if isinstance(warm, int):
            full = warm >= size
        else:
            full = isinstance(workers, int) and workers >= size and chromium_count(target.state_dir) >= size
        if full:
            await asyncio.sleep(0.3)
            return True
        await asyncio.sleep(0.1)
    return False


async def quiet(label: str, within: float = QUIET_WITHIN_S) -> float:
    """Until the whole machine is at most QUIET_BUSY_SHARE busy over one QUIET_WINDOW_S window (or
    ``within`` has passed: said, and measured anyway); the share of the last window."""
    end = time.perf_counter() + within
    while True:
        busy0, total0 = machine_busy_jiffies()
        await asyncio.sleep(QUIET_WINDOW_S)
        busy1, total1 = machine_busy_jiffies()
        share = (busy1 - busy0) / max(1, total1 - total0)
        if share <= QUIET_BUSY_SHARE:
            return share
        if time.perf_counter() >= end:
            say(f"{label}: the machine stayed {share:.0%} busy for {within:.0f} s; measuring anyway")
            return share


async def repeat(reps: int, step: Callable[[], Awaitable[None]], label: str) -> None:
    for k in range(reps):
        await step()
        say(f"  {label} {k + 1}/{reps}")


# -- 4. memory -------------------------------------------------------------------------------------


@dataclass
class MemoryRow:
    sessions: int
    kind: str  # "idle" (initialize only) or "browsing" (navigated)
    router_rss_kib: int
    worker_pss_kib: int
    worker_procs: int
    per_session_pss_kib: float


def memory_row(router: Target, sessions: list[McpSession], kind: str) -> MemoryRow:
    pids = processes_for(router.state_dir)
    total = pss_kib(pids)
    per = [pss_kib(processes_for(router.state_dir, s.session_id)) for s in sessions[:20]]
    return MemoryRow(
        len(sessions), kind, rss_kib(router.child.pid), total, len(pids), statistics.mean(per) if per else 0.0
    )


async def open_sessions(router: Target, count: int, page: str | None, concurrency: int = 4) -> list[McpSession]:
    """`count` new sessions on the router (navigated to `page` when given), a few at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> McpSession:
        async with gate:
            s = McpSession(router.endpoint, new_http(2))
            await s.initialize()
            if page is not None:
                await s.call("browser_navigate", url=page)
            return s

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def close_sessions(sessions: list[McpSession], concurrency: int = 8) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(s: McpSession) -> None:
        async with gate:
            await s.delete()
            await s.http.aclose()

    await asyncio.gather(*(one(s) for s in sessions))


# -- 5. throughput ---------------------------------------------------------------------------------


@dataclass
class ThroughputResult:
    sessions: int
    seconds: float
    calls: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    first_error: str = ""
    cpu_ms_per_call: float | None = None  # user + system of the router
    # Its CPU while the same sessions sit idle (the router's health checks, timers): a per-second
    # cost that the loop's calls/s spread over each call.
    idle_cpu_ms_per_s: float | None = None


async def throughput(
    sessions: list[McpSession], page: str, seconds: float, pid: int | None = None
) -> ThroughputResult:
    result = ThroughputResult(len(sessions), seconds)
    if pid is not None:
        cpu0, t0 = cpu_seconds_fine(pid), time.perf_counter()
        await asyncio.sleep(IDLE_WINDOW_S)
        result.idle_cpu_ms_per_s = (cpu_seconds_fine(pid) - cpu0) * 1000 / (time.perf_counter() - t0)
    cpu0 = cpu_seconds(pid) if pid is not None else 0.0
    end = time.perf_counter() + seconds

    async def loop(k: int, s: McpSession) -> None:
        n = 0
        while time.perf_counter() < end:
            n += 1
            for tool, args in (
                ("browser_navigate", {"url": f"{page}item/{(k * 7 + n) % 30}"}),
                ("browser_snapshot", {}),
            ):
                try:
                    _, dt = await s.call(tool, **args)
                    result.calls += 1
                    result.latencies.append(dt)
                except Exception as exc:  # counted, and the first one shown
                    result.errors += 1
                    result.first_error = result.first_error or failure(exc)

    start = time.perf_counter()
    await asyncio.gather(*(loop(k, s) for k, s in enumerate(sessions)))
    result.seconds = time.perf_counter() - start
    if pid is not None and result.calls:
        result.cpu_ms_per_call = (cpu_seconds(pid) - cpu0) * 1000 / result.calls
    return result
