"""Memory and throughput of sessions sharing a browser (``--sessions-per-browser N``) against a
worker per session (the default), each on a router of its own started for the measurement.

Memory: sessions that each navigated to the test page and took a snapshot, all kept live; the
PSS of the router's whole process tree (the router, its workers, Chromium and its helpers) with
one session and with all of them. Throughput: many sessions at once, each looping
``browser_navigate`` + ``browser_snapshot`` (bench_lib.measure.throughput)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

import httpx
from bench_lib import measure as m
from bench_lib.client import CallError, McpSession
from bench_lib.handshakes import probe_done
from bench_lib.procs import chromium_count, settled_router_memory
from bench_lib.report import header, throughput_table
from bench_lib.targets import Env, Target, start_router

from router.settings import WORKER_MEMORY_BYTES
from workers.memory import host_memory

SPARE_WORKERS: Final = 5  # --max-live-workers above the sessions measured: no session waits for a slot
KIB: Final = 1024
MEMORY_COLUMNS: Final = (
    "router", "sessions", "processes", "Chromium", "PSS MiB", "per added session", "USS MiB", "per added session",
)


@dataclass(frozen=True)
class Mode:
    label: str
    flags: tuple[str, ...]


def modes(capacity: int) -> tuple[Mode, Mode]:
    """(sessions sharing a browser, a worker per session)."""
    shared = Mode(f"shared (`--sessions-per-browser {capacity}`)", ("--sessions-per-browser", str(capacity)))
    return shared, Mode("a worker per session (the default)", ())


@dataclass
class MemoryPoint:
    sessions: int
    pss_kib: int  # the router's whole process tree
    uss_kib: int  # its private memory: what other users' processes sharing pages do not move
    processes: int
    browsers: int  # Chromium main processes


@dataclass
class ModeMemory:
    mode: Mode
    points: list[MemoryPoint] = field(default_factory=list)
    off_page: list[str] = field(default_factory=list)  # sessions whose snapshot was not of the page
    error: str = ""

    def per_added_kib(self, uss: bool = False) -> float | None:
        """(PSS, or USS, at the last level − at the first) ÷ the sessions added in between."""
        if len(self.points) < 2 or self.points[-1].sessions == self.points[0].sessions:
            return None
        first, last = self.points[0], self.points[-1]
        added = last.uss_kib - first.uss_kib if uss else last.pss_kib - first.pss_kib
        return added / (last.sessions - first.sessions)


@dataclass
class ModeThroughput:
    mode: Mode
    result: m.ThroughputResult | None = None
    open_s: float = 0.0  # opening every session (each navigated), a few at a time
    pss_kib: int = 0  # the router's whole process tree after the loop
    browsers: int = 0
    error: str = ""


@asynccontextmanager
async def mode_router(env: Env, kind: str, mode: Mode, sessions: int) -> AsyncIterator[tuple[Target, list[McpSession]]]:
    """A router in ``mode`` with room for ``sessions`` live workers, its start-up probe worker gone
    (not measured); the sessions put in the list are closed and the router stopped on the way out."""
    name = f"router-{kind}" + "".join(mode.flags).replace("--", "-")
    router = start_router(env, name, "--max-live-workers", str(sessions + SPARE_WORKERS), *mode.flags)
    opened: list[McpSession] = []
    try:
        await probe_done(router)
        yield router, opened
    finally:
        await m.close_sessions(opened)
        env.registry.stop(router.child)


async def off_page(sessions: list[McpSession], page: str) -> list[str]:
    """Each session's snapshot, taken now: why, for each whose current page is not ``page``."""

    async def check(s: McpSession) -> str | None:
        text, _ = await s.call("browser_snapshot")
        return None if f"Page URL: {page}" in text else f"{s.session_id}: {text[:160]!r}"

    return [why for why in await asyncio.gather(*(check(s) for s in sessions)) if why is not None]


async def memory(env: Env, page: str, mode: Mode, sessions: int) -> ModeMemory:
    got = ModeMemory(mode)
    async with mode_router(env, "mem", mode, sessions) as (router, opened):
        try:
            for level in sorted({1, sessions}):
                added = await m.open_sessions(router, level - len(opened), page)
                opened += added
                got.off_page += await off_page(added, page)
                await m.quiet(f"memory at {level} sessions")
                pss, uss, processes = await settled_router_memory(router.child.pid, router.state_dir)
                got.points.append(MemoryPoint(level, pss, uss, processes, chromium_count(router.state_dir)))
                m.say(f"  {mode.label}: {level} sessions, PSS {pss / KIB:.0f} MiB, {processes} processes")
        except (CallError, httpx.HTTPError) as exc:
            got.error = m.failure(exc)
    return got


def fitting_sessions(wanted: int) -> tuple[int, str]:
    """How many sessions a worker each the machine's available memory holds (at the router's own
    estimate of a worker), at most ``wanted``; and a note when that is fewer."""
    available = host_memory().available()
    if available is None:
        return wanted, ""
    fits = max(1, available // WORKER_MEMORY_BYTES)
    if fits >= wanted:
        return wanted, ""
    return fits, f"{wanted} workers do not fit in {available // KIB // KIB} MiB available: measured at {fits}"


async def throughput(env: Env, page: str, mode: Mode, sessions: int, seconds: float) -> ModeThroughput:
    got = ModeThroughput(mode)
    async with mode_router(env, "tp", mode, sessions) as (router, opened):
        try:
            start = time.perf_counter()
            opened += await m.open_sessions(router, sessions, page)
            got.open_s = time.perf_counter() - start
            await m.quiet("throughput")
            m.say(f"  {mode.label}: {sessions} sessions × navigate+snapshot for {seconds:.0f} s")
            got.result = await m.throughput(opened, page, seconds, pid=router.child.pid)
            got.pss_kib, _, _ = await settled_router_memory(router.child.pid, router.state_dir)
            got.browsers = chromium_count(router.state_dir)
        except (CallError, httpx.HTTPError) as exc:
            got.error = m.failure(exc)
    return got


def memory_table(rows: list[ModeMemory]) -> list[str]:
    out = header(MEMORY_COLUMNS)
    for row in rows:
        added, added_uss = row.per_added_kib(), row.per_added_kib(uss=True)
        for k, p in enumerate(row.points):
            per = f"{added / KIB:.1f}" if k and added is not None else "—"
            per_uss = f"{added_uss / KIB:.1f}" if k and added_uss is not None else "—"
            out.append(f"| {row.mode.label} | {p.sessions} | {p.processes} | {p.browsers} | {p.pss_kib / KIB:.0f} "
                       f"| {per} | {p.uss_kib / KIB:.0f} | {per_uss} |")  # fmt: skip
        if row.error:
            out.append(f"| {row.mode.label} | failed: {row.error} | | | | | | |")
    notes = [f"- {r.mode.label}: {len(r.off_page)} sessions' snapshot not of the page ({r.off_page[0]})"
             for r in rows if r.off_page]  # fmt: skip
    return [*out, "", *notes] if notes else out


def throughput_lines(rows: list[ModeThroughput]) -> list[str]:
    measured = [(r, r.result) for r in rows if r.result is not None]
    out = throughput_table([t for _, t in measured], [r.mode.label for r, _ in measured])
    notes = [f"{r.mode.label}: sessions opened (each navigated) in {r.open_s:.1f} s; PSS after the loop "
             f"{r.pss_kib / KIB:.0f} MiB, {r.browsers} Chromium" for r, _ in measured]  # fmt: skip
    notes += [f"{r.mode.label}: failed: {r.error}" for r in rows if r.error]
    return [*out, "", *(f"- {note}" for note in notes)]
