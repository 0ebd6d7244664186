"""Part of the handshakes phase: what a conversation waits for when its worker is new to it. The
first call after a warm ``initialize`` against the calls after it; ten sessions whose workers were
reaped resuming at once. (The worker's node start-up is the `node` phase, bench_lib/node_start.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from bench_lib.cc_client import CcSession
from bench_lib.client import CallError, McpSession
from bench_lib.measure import new_http, pct, quiet, say, wait_pool
from bench_lib.targets import Env, Target, start_router

STEADY_CALLS: Final = 3
PREPARED_WITHIN: Final = 3.0  # the pool prepares its workers' client sessions once a second
RESERVE_READY_EACH: Final = 20.0  # the reserve fills one worker at a time, ~2-5 s each under load


@dataclass
class FirstCallRow:
    label: str
    first: list[float] = field(default_factory=list)  # seconds
    steady: list[float] = field(default_factory=list)
    note: str = ""

    def ratio(self) -> float | None:
        """First call p50 ÷ steady call p50."""
        return pct(self.first, 50) / pct(self.steady, 50) if self.first and self.steady else None

    def each(self) -> list[float]:
        """Each conversation's first call ÷ the p50 of its own steady calls."""
        steady = [self.steady[k * STEADY_CALLS : (k + 1) * STEADY_CALLS] for k in range(len(self.first))]
        return [first * 1000 / pct(own, 50) for first, own in zip(self.first, steady, strict=True)]


@dataclass
class AtOnceRow:
    label: str
    at_once: int
    calls: list[float] = field(default_factory=list)
    failures: int = 0
    first_failure: str = ""

    def p50_s(self) -> float | None:
        return pct(self.calls, 50) / 1000 if self.calls else None


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


async def cc_conversation(target: Target, page: str, row: FirstCallRow | None) -> str:
    """A Claude-Code-shaped conversation that browses and goes (no DELETE); its session id."""
    cc = CcSession(target.endpoint)
    try:
        await cc.handshake()
        await _navigates(cc.call, page, row)
    finally:
        await cc.close()
    return cc.session_id or ""


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
        for row, conversation in ((plain, _plain_conversation), (cc, cc_conversation)):
            await wait_pool(router, 1)
            await conversation(router, page, None)  # untimed: the pool learns this client's shape
            for k in range(reps):
                await wait_pool(router, 1)
                await asyncio.sleep(PREPARED_WITHIN)
                await quiet("first call")
                await conversation(router, page, row)
                say(f"  first call after warm initialize ({row.label[:20]}) {k + 1}/{reps}")
    finally:
        env.registry.stop(router.child)
    return [plain, cc]


# -- resumes at once --------------------------------------------------------------------------------


async def resumes_at_once(env: Env, page: str, at_once: int, reap_idle: float, reserve: int = 10) -> AtOnceRow:
    """``at_once`` conversations open a page, pause until their workers are reaped, then all click
    the ref they hold at the same moment, once the resume reserve (``--resume-reserve``) is ready."""
    from bench_lib.handshakes import CLICK, open_page, wait_reaped

    row = AtOnceRow(f"router, {at_once} sessions resuming at once, `--resume-reserve {reserve}`", at_once)
    router = start_router(
        env, "router-at-once", "--idle-timeout", f"{reap_idle:g}", "--resume-reserve", str(reserve)
    )
    sessions = [CcSession(router.endpoint) for _ in range(at_once)]
    try:
        refs = [await open_page(cc, page) for cc in sessions]
        for cc in sessions:
            await wait_reaped(router, cc.session_id or "")
        await wait_pool(router, min(reserve, at_once), within=RESERVE_READY_EACH * max(1, reserve))
        await quiet("resumes at once")

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
