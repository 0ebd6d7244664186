"""Part of the handshakes phase: what a conversation waits for when its worker is new to it. The
first call after a warm ``initialize`` against the calls after it; ten sessions whose workers were
reaped resuming at once; and the worker's node start-up, with and without a V8 compile cache."""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench_lib.cc_client import CcSession
from bench_lib.client import CallError, McpSession
from bench_lib.measure import new_http, say, wait_pool
from bench_lib.procs import free_port
from bench_lib.targets import Env, Target, playwright_args, start_router

STEADY_CALLS: Final = 3
PREPARED_WITHIN: Final = 3.0  # the pool prepares its workers' client sessions once a second
NODE_READY_WITHIN: Final = 30.0
LISTENING: Final = "Listening on"


@dataclass
class FirstCallRow:
    label: str
    first: list[float] = field(default_factory=list)  # seconds
    steady: list[float] = field(default_factory=list)
    note: str = ""


@dataclass
class AtOnceRow:
    label: str
    at_once: int
    calls: list[float] = field(default_factory=list)
    failures: int = 0
    first_failure: str = ""


@dataclass
class NodeStartRow:
    label: str
    wall: list[float] = field(default_factory=list)  # ms, spawn → "Listening on"
    cpu: list[float] = field(default_factory=list)  # ms of CPU the process had used by then
    note: str = ""


# -- first call after a warm initialize --------------------------------------------------------------


Call = Callable[..., Awaitable[tuple[str, float]]]


async def _navigates(call: Call, page: str, row: FirstCallRow | None) -> None:
    _, first = await call("browser_navigate", url=page)
    steady = [(await call("browser_navigate", url=f"{page}?n={k}"))[1] for k in range(STEADY_CALLS)]
    if row is not None:
        row.first.append(first)
        row.steady += steady


async def _plain_conversation(target: Target, page: str, row: FirstCallRow | None) -> None:
    s = McpSession(target.endpoint, new_http(1))
    try:
        await s.initialize()
        await _navigates(s.call, page, row)
    finally:
        await s.delete()
        await s.http.aclose()


async def _cc_conversation(target: Target, page: str, row: FirstCallRow | None) -> None:
    cc = CcSession(target.endpoint)
    try:
        await cc.handshake()
        await _navigates(cc.call, page, row)
    finally:
        await cc.close()


async def first_calls(env: Env, page: str, reps: int) -> list[FirstCallRow]:
    """A router with one warm worker: each new conversation's first ``browser_navigate`` lands in
    the pool's browser, on the MCP session the pool prepared in that client's shape."""
    plain = FirstCallRow("no capabilities declared", note="the pool made one call on the prepared session")
    cc = FirstCallRow(
        "Claude-Code-shaped (roots + elicitation, GET stream)",
        note="the pool made one call on the prepared session, with the roots the router had asked the last client",
    )
    router = start_router(env, "router-first-call", "--warm-workers", "1")
    try:
        for row, conversation in ((plain, _plain_conversation), (cc, _cc_conversation)):
            await wait_pool(router, 1)
            await conversation(router, page, None)  # untimed: the pool learns this client's shape
            for k in range(reps):
                await wait_pool(router, 1)
                await asyncio.sleep(PREPARED_WITHIN)
                await conversation(router, page, row)
                say(f"  first call after warm initialize ({row.label[:20]}) {k + 1}/{reps}")
    finally:
        env.registry.stop(router.child)
    return [plain, cc]


# -- resumes at once --------------------------------------------------------------------------------


async def resumes_at_once(env: Env, page: str, at_once: int, reap_idle: float) -> AtOnceRow:
    """``at_once`` conversations open a page, pause until their workers are reaped, then all click
    the ref they hold at the same moment (the resume reserve readies one warm worker)."""
    from bench_lib.handshakes import CLICK, open_page, wait_reaped

    row = AtOnceRow(f"router, {at_once} sessions resuming at once", at_once)
    router = start_router(env, "router-at-once", "--idle-timeout", f"{reap_idle:g}")
    sessions = [CcSession(router.endpoint) for _ in range(at_once)]
    try:
        refs = [await open_page(cc, page) for cc in sessions]
        for cc in sessions:
            await wait_reaped(router, cc.session_id or "")
        await wait_pool(router, 1)  # the resume reserve

        async def click(cc: CcSession, ref: str) -> float:
            _, dt = await cc.call("browser_click", element=CLICK, target=ref)
            return dt

        clicks = (click(cc, ref) for cc, ref in zip(sessions, refs, strict=True))
        results = await asyncio.gather(*clicks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                row.failures += 1
                row.first_failure = row.first_failure or f"{type(r).__name__}: {str(r)[:200]}"
            else:
                row.calls.append(r)
    except CallError as exc:
        row.failures += 1
        row.first_failure = row.first_failure or str(exc)[:200]
    finally:
        await asyncio.gather(*(cc.close() for cc in sessions))
        env.registry.stop(router.child)
    return row


# -- node start-up ----------------------------------------------------------------------------------


def _cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _start_once(env: Env, prefix: list[str], environ: dict[str, str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir=env.work) as scratch:
        base = Path(scratch)
        argv = prefix + playwright_args(env, port=free_port(), profile=base / "p", out=base / "o", isolated=False)[1:]
        started = time.perf_counter()
        child = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **environ}
        )
        try:
            assert child.stderr is not None
            deadline = started + NODE_READY_WITHIN
            for line in child.stderr:
                if LISTENING in line or time.perf_counter() > deadline:
                    break
            wall = (time.perf_counter() - started) * 1000
            cpu = _cpu_ms(child.pid)
        finally:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return wall, cpu


def node_starts(env: Env, reps: int, *, v8_compile_cache: Path | None, newer_node: Path | None) -> list[NodeStartRow]:
    """The worker's node from spawn to listening (``cli.js`` loads ~7 MB of bundled JavaScript),
    as the router starts it and with a compile cache; variants interleaved, a first untimed round
    fills the caches."""
    cache = Path(tempfile.mkdtemp(dir=env.work, prefix="compile-cache-"))
    variants: list[tuple[NodeStartRow, list[str], dict[str, str]]] = [
        (NodeStartRow("node (as the router starts it)"), ["node"], {}),
    ]
    if v8_compile_cache is not None:
        variants.append(
            (
                NodeStartRow("node + v8-compile-cache (require hook)"),
                ["node", "-r", str(v8_compile_cache)],
                {"V8_COMPILE_CACHE_CACHE_DIR": str(cache / "v8cc")},
            )
        )
    if newer_node is not None:
        version = subprocess.run([str(newer_node), "--version"], capture_output=True, text=True).stdout.strip()
        variants.append((NodeStartRow(f"node {version}"), [str(newer_node)], {}))
        variants.append(
            (
                NodeStartRow(f"node {version} + NODE_COMPILE_CACHE"),
                [str(newer_node)],
                {"NODE_COMPILE_CACHE": str(cache / "ncc")},
            )
        )
    for k in range(reps + 1):
        for row, prefix, environ in variants:
            wall, cpu = _start_once(env, prefix, environ)
            if k:
                row.wall.append(wall)
                row.cpu.append(cpu)
        say(f"  node start {k}/{reps}")
    rows = [row for row, _, _ in variants]
    if v8_compile_cache is None and newer_node is None:
        rows[0].note = "no cache variant measured: pass --v8-compile-cache / --newer-node"
    base = statistics.median(rows[0].cpu) if rows[0].cpu else 0
    for row in rows[1:]:
        if base and row.cpu:
            row.note = f"CPU {100 * (1 - statistics.median(row.cpu) / base):+.0f} % saved vs the first row"
    return rows
