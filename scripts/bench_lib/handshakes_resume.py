"""Part of the handshakes phase: what a conversation waits for when its worker is new to it. The
first call after a warm ``initialize`` against the calls after it; ten sessions whose workers were
reaped resuming at once. (The worker's node start-up is the `node` phase, bench_lib/node_start.py.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from bench_lib.cc_client import CcSession
from bench_lib.client import CallError, McpSession, new_http
from bench_lib.measure import button_ref, failure, pct, quiet, say, wait_pool
from bench_lib.targets import Env, Target, start_router, start_worker

from router.sessions.control import ControlError
from router.sessions.warm_up import warm_browser

STEADY_CALLS: Final = 3
PREPARED_WITHIN: Final = 3.0  # the pool prepares its workers' client sessions once a second
RESERVE_READY_EACH: Final = 20.0  # the reserve fills one worker at a time, ~2-5 s each under load
# Bursts of sessions resuming at once, pooled: one burst's p50 moves by a few tenths of a second
# from run to run on two cores.
RESUME_BURSTS: Final = 2


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


@dataclass
class AtOnce:
    """Sessions resuming at once through the router, and the same browser work done by as many
    direct workers at once (the reference: what two cores take for it without the router)."""

    routed: AtOnceRow
    direct: AtOnceRow

    def rows(self) -> list[AtOnceRow]:
        return [self.routed, self.direct]


async def resumes_at_once(
    env: Env, page: str, at_once: int, reap_idle: float, reserve: int = 10, bursts: int = RESUME_BURSTS
) -> AtOnce:
    """``at_once`` conversations open a page, pause until their workers are reaped, then all click
    the ref they hold at the same moment, once the resume reserve (``--resume-reserve``) is ready;
    ``bursts`` times, pooled. Before each burst, while the sessions lie dormant, the reference's burst (see
    ``_direct_loads``)."""
    from bench_lib.handshakes import open_page, wait_reaped

    routed = AtOnceRow(f"router, {at_once} sessions resuming at once, `--resume-reserve {reserve}`", at_once)
    direct = AtOnceRow(
        f"direct workers (no router), {at_once} at once: `browser_navigate` to the page, then `browser_click` "
        f"(a resume's browser work; new workers, browsers warmed as the reserve's are)", at_once,
    )
    router = start_router(
        env, "router-at-once", "--idle-timeout", f"{reap_idle:g}", "--resume-reserve", str(reserve)
    )
    sessions = [CcSession(router.endpoint) for _ in range(at_once)]
    try:
        refs = [await open_page(cc, page) for cc in sessions]
        for burst in range(bursts):
            if burst:
                refs = [await _button_ref(cc) for cc in sessions]  # the page as the last click left it
            for cc in sessions:
                await wait_reaped(router, cc.session_id or "")
            await wait_pool(router, min(reserve, at_once), within=RESERVE_READY_EACH * max(1, reserve))
            await _direct_loads(env, page, at_once, direct)
            await quiet("resumes at once")
            clicks = (_timed_click(cc, ref) for cc, ref in zip(sessions, refs, strict=True))
            _gathered(routed, await asyncio.gather(*clicks, return_exceptions=True))
            say(f"  resumes at once: burst {burst + 1}/{bursts}")
    except CallError as exc:
        routed.failures += 1
        routed.first_failure = routed.first_failure or str(exc)[:200]
    finally:
        await asyncio.gather(*(cc.close() for cc in sessions))
        env.registry.stop(router.child)
    return AtOnce(routed, direct)


async def _direct_loads(env: Env, page: str, at_once: int, row: AtOnceRow) -> None:
    """One burst of the reference: ``at_once`` direct workers, new ones (so the page is new to
    each browser, as to a resumed one), their browsers up and warmed as the reserve's are, each
    load the page and click its button at the same moment. Timed from the burst's start to
    the click's answer, as the router's resumed click is."""
    from bench_lib.handshakes import CLICK

    workers: list[Target] = []
    sessions: list[CcSession] = []
    try:
        for k in range(at_once):
            workers.append(start_worker(env, f"direct-at-once-{k}"))
            sessions.append(CcSession(workers[-1].endpoint))
            await sessions[-1].handshake()
            # Launches the browser and warms it as the router's pool warms the reserve's.
            port = urlsplit(workers[-1].endpoint.url).port
            await warm_browser(_Caller(sessions[-1]), f"http://localhost:{port}/")
        await quiet("direct loads at once")

        async def load_and_click(cc: CcSession) -> float:
            started = time.perf_counter()
            text, _ = await cc.call("browser_navigate", url=page)
            await cc.call("browser_click", element=CLICK, target=button_ref(text, cc.endpoint.name))
            return time.perf_counter() - started

        _gathered(row, await asyncio.gather(*(load_and_click(cc) for cc in sessions), return_exceptions=True))
    except (CallError, ControlError) as exc:  # a worker that would not warm up: counted, not raised
        row.failures += 1
        row.first_failure = row.first_failure or str(exc)[:200]
    finally:
        await asyncio.gather(*(cc.close() for cc in sessions))
        for worker in workers:
            env.registry.stop(worker.child)


@dataclass
class _Caller:
    """A direct worker's client with a control session's ``call`` (for ``warm_browser``)."""

    cc: CcSession

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> str:
        try:
            text, _ = await self.cc.call(tool, **(arguments or {}))
        except CallError as exc:
            raise ControlError(str(exc)) from None
        return text


async def _timed_click(cc: CcSession, ref: str) -> float:
    from bench_lib.handshakes import CLICK

    _, elapsed = await cc.call("browser_click", element=CLICK, target=ref)
    return elapsed


async def _button_ref(cc: CcSession) -> str:
    text, _ = await cc.call("browser_snapshot")
    return button_ref(text, cc.endpoint.name)


def _gathered(row: AtOnceRow, results: list[float | BaseException]) -> None:
    for result in results:
        if isinstance(result, BaseException):
            row.failures += 1
            row.first_failure = row.first_failure or failure(result)
        else:
            row.calls.append(result)
