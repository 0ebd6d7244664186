"""The `conversation` phase: `claude --resume` as the router sees it. A Claude-Code-shaped
conversation, named on ``initialize`` as ``mcp-router stdio`` names it (the
``Mcp-Router-Conversation`` header carrying ``CLAUDE_CODE_SESSION_ID``), browses, sets a session
cookie and localStorage, and ends as the bridge ends at EOF (DELETE). A new session of the same
conversation then makes its first call: timed, and checked to find the page, cookie and storage."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from typing import Final

from bench_lib.cc_client import CcSession
from bench_lib.client import CallError, Endpoint
from bench_lib.measure import med_ms, pct, quiet, say
from bench_lib.report import Goal
from bench_lib.targets import Env, start_router

from router.types import H_CONVERSATION

GOAL_S: Final = 1.5  # the first call of a resumed conversation, p50
SETTLE_S: Final = 1.0  # the router's reserve and saves after the DELETE, before the next process
MARK: Final = "() => { document.cookie = 'bench=resumed; path=/'; localStorage.setItem('bench', 'kept'); return 1; }"
READ: Final = "() => document.cookie + ' | ' + localStorage.getItem('bench')"


@dataclass
class Named(Endpoint):
    """The router's endpoint, with the conversation's key on every request (read on initialize)."""

    conversation: str = ""

    def headers(self) -> dict[str, str]:
        return {**super().headers(), H_CONVERSATION: self.conversation}


@dataclass
class ConversationRow:
    firsts: list[float] = field(default_factory=list)  # seconds: the resumed session's first call
    steady: list[float] = field(default_factory=list)  # its calls after that
    missing: list[str] = field(default_factory=list)  # what a resumed session did not find


async def _process(endpoint: Named, page: str, row: ConversationRow | None) -> None:
    cc = CcSession(endpoint)
    try:
        await cc.handshake()
        if row is None:  # the first process of the conversation
            await cc.call("browser_navigate", url=page)
            await cc.call("browser_evaluate", function=MARK)
        else:
            text, first = await cc.call("browser_snapshot")
            found, _ = await cc.call("browser_evaluate", function=READ)
            row.firsts.append(first)
            if f"Page URL: {page}" not in text or "bench=resumed" not in found or "kept" not in found:
                row.missing.append(f"page/cookie/storage not back: {found[:120]!r}")
            row.steady += [(await cc.call("browser_snapshot"))[1] for _ in range(3)]
        await cc.delete()  # as the bridge ends at EOF
    finally:
        await cc.close()


async def measure(env: Env, page: str, reps: int) -> ConversationRow:
    row = ConversationRow()
    router = start_router(env, "router-conversation")
    try:
        base = router.endpoint
        for k in range(reps):
            endpoint = Named(base.name, base.url, base.host, base.token, conversation=secrets.token_hex(16))
            try:
                await _process(endpoint, page, None)
                await asyncio.sleep(SETTLE_S)
                await quiet("conversation")
                await _process(endpoint, page, row)
            except CallError as exc:
                row.missing.append(str(exc)[:200])
            say(f"  conversation resumed {k + 1}/{reps}")
    finally:
        env.registry.stop(router.child)
    return row


def table(row: ConversationRow) -> list[str]:
    out = [
        f"### A conversation resumed (a new session naming it, as `mcp-router stdio` does after `claude --resume`), "
        f"{len(row.firsts)} conversations",
        "",
        "| call | p50 ms | p95 ms |",
        "|---|---:|---:|",
    ]
    if row.firsts:
        out.append(f"| first call of the new session (browser restored) | {med_ms(row.firsts):.0f} | "
                   f"{pct(row.firsts, 95):.0f} |")
    if row.steady:
        out.append(f"| its calls after that | {med_ms(row.steady):.0f} | {pct(row.steady, 95):.0f} |")
    if row.missing:
        out += ["", f"Not as expected: {len(row.missing)} ({row.missing[0]})"]
    return [*out, ""]


def goals(row: ConversationRow) -> list[Goal]:
    p50 = med_ms(row.firsts) / 1000 if row.firsts and not row.missing else None
    note = f"{len(row.firsts)} conversations" if not row.missing else f"{len(row.missing)} not restored"
    return [Goal("first call of a resumed conversation, p50", p50, GOAL_S, unit=" s", note=note)]
