"""The same client tests, run directly against a worker and through the router (parity).

The client is the Python `mcp` SDK in legacy (initialize) mode on both sides, since the stand-in
worker also speaks the sessionless 2026-07-28 era when asked directly. The SDK's default "auto" mode,
which probes `server/discover` first, is tested on its own: through the router it must fall back
to initialize and end in a session.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext

from tests.support import FAKE_WORKER, TEST_TOKEN, RouterThread, spare_port, wait_for


@pytest.fixture(scope="module")
def direct_worker() -> Iterator[str]:
    port = spare_port()
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_WORKER), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        import socket

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(params=["direct", "router"])
def url(request: pytest.FixtureRequest, direct_worker: str, fake_router: RouterThread) -> str:
    return direct_worker if request.param == "direct" else with_token(fake_router.url)


def with_token(url: str) -> str:
    # The SDK client takes a URL only: the token rides on it, as for clients that cannot set headers.
    return f"{url}?token={TEST_TOKEN}"


async def roots_callback(context: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///srv/app", name="app")])


def text_of(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


async def test_list_tools(url: str) -> None:
    async with Client(url, mode="legacy") as client:
        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        assert {"echo", "slow", "roots"} <= names


async def test_call_tool(url: str) -> None:
    async with Client(url, mode="legacy") as client:
        assert text_of(await client.call_tool("echo", {"text": "parity"})) == "parity"


async def test_progress_notifications(url: str) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(url, mode="legacy") as client:
        result = await client.call_tool("slow", {"seconds": 0.2}, progress_callback=on_progress)
        assert text_of(result) == "done"
    assert seen == [0, 1, 2, 3]


async def test_server_asks_client_for_roots(url: str) -> None:
    async with Client(url, mode="legacy", list_roots_callback=roots_callback) as client:
        assert text_of(await client.call_tool("roots", {})) == "file:///srv/app"


async def test_tool_error_comes_back_as_error(url: str) -> None:
    async with Client(url, mode="legacy") as client:
        result = await client.call_tool("echo", {})
        assert result.is_error


async def test_large_answer_arrives_whole(url: str) -> None:
    async with Client(url, mode="legacy") as client:
        assert len(text_of(await client.call_tool("big", {"size": 300_000}))) == 300_000


async def test_session_ends_on_close_through_router(fake_router: RouterThread, tmp_path: Path) -> None:
    async with Client(with_token(fake_router.url)) as client:
        await client.list_tools()
        assert len(fake_router.manager.sessions.live()) >= 1
        live_before = {s.id for s in fake_router.manager.sessions.live()}
    # The SDK client sends DELETE on close; its session and worker go away.
    wait_for(lambda: len({s.id for s in fake_router.manager.sessions.live()}) < len(live_before), timeout=10)


async def test_default_auto_mode_client_falls_back_to_a_session(fake_router: RouterThread) -> None:
    async with Client(with_token(fake_router.url), list_roots_callback=roots_callback) as client:
        assert client.session.initialize_result is not None, "expected the initialize handshake"
        assert text_of(await client.call_tool("roots", {})) == "file:///srv/app"
