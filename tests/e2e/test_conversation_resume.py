"""`claude --resume` through the real parts: `mcp-router stdio` run as Claude Code runs it (its
``CLAUDE_CODE_SESSION_ID`` set, one process after the other, each ending with EOF on stdin), the
router, real @playwright/mcp workers and Chromium. The second process of a conversation finds the
first one's page, cookies (the session cookie too) and storage; another key, or the same key
under another token, starts with an empty browser."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import mcp_types as types
import pytest
from mcp.client.session import ClientSession

from router.sessions.table import State
from tests.e2e.claude_code import ClaudeCodeClient
from tests.support import RouterThread, wait_for
from tests.support.routers import playwright_router
from tests.support.stdio import bridged_session, bridged_session_id

CONVERSATION = "6c1f2e0a-7d3b-4c55-9a1e-0f2b3c4d5e6f"
GONE_WITHIN = 30.0
REAPED_WITHIN = 20.0  # a save and a worker's end, on a loaded 2-core machine


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


@asynccontextmanager
async def bridge_process(
    router: RouterThread, tmp_path: Path, key: str | None, name: str, token: str | None = None,
    ids: list[str] | None = None,
) -> AsyncIterator[ClientSession]:
    """One bridge process of a conversation, ``CLAUDE_CODE_SESSION_ID`` set as Claude Code sets
    it; leaving closes its stdin (EOF), and waits until its DELETE ended its router session."""
    env = {} if key is None else {"CLAUDE_CODE_SESSION_ID": key}
    if token is not None:
        env["MCP_ROUTER_TOKEN"] = token
    errlog = tmp_path / f"{name}.err"
    with errlog.open("w") as err:
        async with bridged_session(router.url, err, env=env) as session:
            yield session
    session_id = bridged_session_id(errlog)
    wait_for(lambda: router.manager.sessions.get(session_id) is None, timeout=GONE_WITHIN)
    if ids is not None:
        ids.append(session_id)


async def evaluate(session: ClientSession, expression: str) -> str:
    return text(await session.call_tool("browser_evaluate", {"function": f"() => {expression}"}))


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    with playwright_router(tmp_path_factory.mktemp("conversations"), chromium) as r:
        yield r


async def test_the_resumed_conversation_finds_its_page_cookies_and_storage(
    router: RouterThread, pages: str, tmp_path: Path
) -> None:
    ids: list[str] = []
    async with bridge_process(router, tmp_path, CONVERSATION, "first", ids=ids) as session:
        text(await session.call_tool("browser_navigate", {"url": f"{pages}/set?v=kept42"}))
        text(await session.call_tool("browser_navigate", {"url": f"{pages}/app?login=alice7"}))
        assert "session=alice7" in await evaluate(session, "document.cookie")  # no expiry: a session cookie

    async with bridge_process(router, tmp_path, CONVERSATION, "second", ids=ids) as session:
        snapshot = text(await session.call_tool("browser_snapshot", {}))
        assert f"- Page URL: {pages}/app" in snapshot  # the page it was on
        assert "restored after the conversation resumed" in snapshot
        cookies = await evaluate(session, "document.cookie")
        assert "session=alice7" in cookies and "token=kept42" in cookies
        assert "kept42" in await evaluate(session, "localStorage.getItem('k')")
    assert len(set(ids)) == 2  # a new MCP session of the same conversation

    # Another conversation (and a client that names none) starts with an empty browser.
    for key, name in (("b7a0c1d2-0000-4000-8000-000000000001", "other"), (None, "unnamed")):
        async with bridge_process(router, tmp_path, key, name) as session:
            snapshot = text(await session.call_tool("browser_snapshot", {}))
            assert "about:blank" in snapshot and "restored" not in snapshot
            text(await session.call_tool("browser_navigate", {"url": f"{pages}/get"}))
            assert "cookie=none storage=none" in text(await session.call_tool("browser_snapshot", {}))


async def test_the_same_key_under_another_token_starts_fresh(
    tmp_path_factory: pytest.TempPathFactory, chromium: str, pages: str, tmp_path: Path
) -> None:
    state = tmp_path_factory.mktemp("conversations-token")
    with playwright_router(state, chromium) as router:
        async with bridge_process(router, tmp_path, CONVERSATION, "first", token=router.token) as session:
            text(await session.call_tool("browser_navigate", {"url": f"{pages}/set?v=secret9"}))
    other_token = "rotated-token-" + "0123456789abcdef" * 3
    (state / "token").write_text(other_token + "\n")
    with playwright_router(state, chromium) as router:
        async with bridge_process(router, tmp_path, CONVERSATION, "second", token=other_token) as session:
            text(await session.call_tool("browser_navigate", {"url": f"{pages}/get"}))
            assert "cookie=none storage=none" in text(await session.call_tool("browser_snapshot", {}))


async def test_a_forked_conversation_gets_a_copy_never_the_live_browser(
    router: RouterThread, pages: str, tmp_path: Path
) -> None:
    """Two processes of one conversation at once (a fork, or two terminals resuming it): each
    starts from the conversation's saved browser, in a browser of its own."""
    key = "f0f0f0f0-1111-4222-8333-444455556666"
    async with bridge_process(router, tmp_path, key, "origin") as session:
        text(await session.call_tool("browser_navigate", {"url": f"{pages}/set?v=shared1"}))
    async with (
        bridge_process(router, tmp_path, key, "fork-a") as a,
        bridge_process(router, tmp_path, key, "fork-b") as b,
    ):
        for fork in (a, b):
            assert "token=shared1" in await evaluate(fork, "document.cookie")  # both got the state
        await evaluate(a, "(document.cookie = 'only=a; path=/', localStorage.setItem('k', 'changed-by-a'), 1)")
        assert "only=a" not in await evaluate(b, "document.cookie")  # a's browser is not b's
        assert "shared1" in await evaluate(b, "localStorage.getItem('k')")
        pids = {s.connection.worker.pid for s in router.manager.sessions if s.conversation and s.connection}
        assert len(pids) == 2


def test_a_claude_code_shaped_conversation_paused_past_the_idle_timeout_comes_back(
    router: RouterThread, pages: str
) -> None:
    """Over HTTP as Claude Code talks (roots declared, GET stream held, never DELETE), naming its
    conversation: it browses, pauses past the idle timeout (reaped: that save is the
    conversation's) and goes without a DELETE; its next process finds the page and the cookies."""
    key = "c0c0c0c0-2222-4333-8444-555566667777"
    with ClaudeCodeClient(router.url, conversation=key) as cc:
        cc.call("browser_navigate", url=f"{pages}/app?login=carol3")
        session = router.manager.sessions.get(cc.session_id)
        idle, router.manager.upkeep.idle_timeout = router.manager.upkeep.idle_timeout, 0.5
        try:
            wait_for(lambda: session.state is State.REAPED, timeout=REAPED_WITHIN)
        finally:
            router.manager.upkeep.idle_timeout = idle
        first = cc.session_id
    assert router.manager.sessions.get(first) is not None  # no DELETE: asleep, not ended
    with ClaudeCodeClient(router.url, conversation=key) as cc:
        snapshot, _ = cc.call("browser_snapshot")
        assert f"- Page URL: {pages}/app" in snapshot and "restored after the conversation resumed" in snapshot
        cookies, _ = cc.call("browser_evaluate", function="() => document.cookie")
        assert "session=carol3" in cookies
        assert cc.session_id != first
