"""A session's resume on a shared browser whose worker is still up (``--sessions-per-browser``):
a session opens the test page and pauses until the router reaps it (its context closed, its state
saved) while another session, calling every KEEP_ALIVE_EVERY s, keeps the host carrying it; the
reaped session's next call (``browser_snapshot``) is timed: a new MCP session on the running host
and the state restored into it, with no process started. Two client shapes: Claude Code's (roots
declared, its GET stream held: bench_lib.cc_client) and a client that declares no capabilities."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import httpx
from bench_lib import handshakes
from bench_lib import measure as m
from bench_lib.cc_client import CcSession
from bench_lib.client import CallError, Endpoint, McpSession, new_http
from bench_lib.handshakes import REAP_IDLE, probe_done, wait_reaped
from bench_lib.report import header
from bench_lib.targets import Env, Target, start_router

from workers.orphans import running_workers

KEEP_ALIVE_EVERY: Final = 1.0  # seconds: well under REAP_IDLE, so the keeping session is never reaped
KEEP_ALIVE_TOOL: Final = "browser_tabs"


class Client(Protocol):
    session_id: str | None

    async def call(self, tool: str, **arguments: Any) -> tuple[str, float]: ...
    async def delete(self) -> None: ...
    async def close(self) -> None: ...


async def _claude_code(endpoint: Endpoint, page: str) -> Client:
    cc = CcSession(endpoint)
    try:
        await handshakes.open_page(cc, page)
    except BaseException:
        await cc.close()
        raise
    return cc


async def _plain(endpoint: Endpoint, page: str) -> Client:
    session = McpSession(endpoint, new_http(2))
    try:
        await m.open_page(session, page)
    except BaseException:
        await session.close()
        raise
    return session


@dataclass(frozen=True)
class Shape:
    label: str
    open: Callable[[Endpoint, str], Awaitable[Client]]  # a new session on the test page


CLAUDE_CODE: Final = Shape("Claude-Code-shaped (roots declared, GET stream held)", _claude_code)
PLAIN: Final = Shape("no client capabilities", _plain)


@dataclass
class SharedResumeRow:
    shape: Shape
    firsts: list[float] = field(default_factory=list)  # seconds: the first call after the reap
    before: list[float] = field(default_factory=list)  # the same call on the same session before it
    missing: list[str] = field(default_factory=list)  # resumes that did not find the page, or failed
    unopened: list[str] = field(default_factory=list)  # sessions that did not find the page before the reap
    hosts_changed: int = 0  # resumes after which another worker carried the sessions (none expected)


async def _keep_alive(session: McpSession, turn: asyncio.Lock) -> None:
    """Calls now and then so the session (and its host) stays; never during a timed call."""
    while True:
        async with turn:
            await session.call(KEEP_ALIVE_TOOL, action="list")
        await asyncio.sleep(KEEP_ALIVE_EVERY)


async def _resume_once(router: Target, page: str, turn: asyncio.Lock, row: SharedResumeRow) -> bool:
    """One session: the page opened, reaped, its first call after that timed. False: it did not
    find its page before the reap, and was not resumed (told in ``row.unopened``)."""
    try:
        client = await row.shape.open(router.endpoint, page)
    except (CallError, httpx.HTTPError) as exc:
        row.unopened.append(m.failure(exc))
        return False
    try:
        async with turn:
            row.before.append((await client.call("browser_snapshot"))[1])
        hosts = running_workers(router.state_dir)
        await wait_reaped(router, client.session_id or "")
        await m.quiet("shared resume")
        async with turn:
            text, took = await client.call("browser_snapshot")
        row.firsts.append(took)
        if f"Page URL: {page}" not in text:
            row.missing.append(f"the page is not back: {text[:200]!r}")
        row.hosts_changed += running_workers(router.state_dir) != hosts
        await client.delete()  # its context closed now, not reaped during the next resume
    except (CallError, httpx.HTTPError) as exc:
        row.missing.append(m.failure(exc))
    finally:
        await client.close()
    return True


async def measure(env: Env, page: str, shape: Shape, reps: int, capacity: int) -> SharedResumeRow:
    """``reps`` sessions of ``shape`` resumed (up to twice as many tried, when some do not open
    their page), on a router of their own."""
    row = SharedResumeRow(shape)
    flags = ("--idle-timeout", f"{REAP_IDLE:g}", "--sessions-per-browser", str(capacity), "--resume-reserve", "0")
    router = start_router(env, "router-shared-resume", *flags)
    # The keeping session declares nothing: what it costs is not this measurement's.
    keeper = McpSession(router.endpoint, new_http(2))
    turn = asyncio.Lock()  # the keeping session's calls and the timed ones take turns
    keeping: asyncio.Task[None] | None = None
    try:
        await probe_done(router)
        await keeper.initialize()
        await keeper.call("browser_navigate", url=page)
        keeping = asyncio.create_task(_keep_alive(keeper, turn))
        tried = 0
        for _ in range(2 * reps):
            tried += await _resume_once(router, page, turn, row)
            m.say(f"  shared resume, {shape.label}: {tried}/{reps} ({len(row.unopened)} did not open)")
            if tried >= reps:
                break
    finally:
        if keeping is not None and keeping.done() and (failed := keeping.exception()) is not None:
            row.missing.append(f"the keeping session failed: {m.failure(failed)}")
        if keeping is not None:
            keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError, CallError, httpx.HTTPError):
                await keeping
        await keeper.close()
        env.registry.stop(router.child)
    return row


def table(rows: list[SharedResumeRow], capacity: int) -> list[str]:
    out = [
        f"### Resume on a shared browser whose worker is still up (`--sessions-per-browser {capacity}`, "
        f"`--idle-timeout {REAP_IDLE:g}`; another session keeps the host)",
        "",
        *header(("client", "`browser_snapshot`", "n", "p50 ms", "p95 ms"), text_columns=2),
    ]
    notes = []
    for row in rows:
        for label, values in (("first call after the reap (context restored)", row.firsts),
                              ("the same session before the reap", row.before)):  # fmt: skip
            if values:
                out.append(f"| {row.shape.label} | {label} | {len(values)} | {m.med_ms(values):.0f} "
                           f"| {m.pct(values, 95):.0f} |")  # fmt: skip
        notes.append(f"- {row.shape.label}: another worker carried the sessions after {row.hosts_changed} "
                     f"of {len(row.firsts)} resumes")  # fmt: skip
        if row.missing:
            notes.append(f"- {row.shape.label}: not as expected: {len(row.missing)} ({row.missing[0]})")
        if row.unopened:
            notes.append(f"- {row.shape.label}: sessions that did not find the page before the reap (not "
                         f"resumed): {len(row.unopened)} ({row.unopened[0]})")  # fmt: skip
    return [*out, "", *notes]
