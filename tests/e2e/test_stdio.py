"""`mcp-router stdio` end to end: the SDK's stdio client, the bridge process, the router, a real
@playwright/mcp worker and Chromium; the worker's roots/list crosses back to the stdio client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types

from router.api_client import fetch_live_sessions_at
from tests.support import TEST_TOKEN, RouterThread, wait_for
from tests.support.stdio import bridged_session, bridged_session_id

ROOT_URI = "file:///tmp/stdio-e2e-project"


async def test_stdio_client_browses_through_the_bridge(pw_router: RouterThread, pages: str, tmp_path: Path) -> None:
    asked: list[str] = []

    async def list_roots(_context: Any) -> types.ListRootsResult:
        asked.append("roots/list")
        return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name="project")])

    errlog = tmp_path / "bridge.err"
    with errlog.open("w") as err:
        async with bridged_session(pw_router.url, err, list_roots=list_roots) as session:
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert {"browser_navigate", "browser_snapshot"} <= tools
            result = await session.call_tool("browser_navigate", {"url": f"{pages}/"})
            assert not result.is_error, result
            text = "".join(part.text for part in result.content if isinstance(part, types.TextContent))
            assert "- Page Title: Home" in text
            # The worker asked for the roots at its first tool call, on the router's GET stream.
            assert asked, "the worker's roots/list never reached the stdio client"
            session_id = bridged_session_id(errlog)

    def state() -> Any:
        rows = fetch_live_sessions_at(pw_router.base_url, token=TEST_TOKEN, timeout=5.0) or []
        return next((row.get("state") for row in rows if row.get("id") == session_id), None)

    # stdin closed: the bridge DELETEd its session, and the record says so.
    wait_for(lambda: state() == "closed", timeout=30)
