"""`mcp-router stdio` driven by the `mcp` SDK's own stdio client, as a stdio-only MCP client runs it."""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.support.auth import TEST_TOKEN
from tests.support.routers import ROOT

SESSION_LINE = re.compile(r"router session (\S+)")
BRIDGE_CLIENT = "stdio-bridge-test"


def bridge_params(
    url: str, *extra: str, token: str = TEST_TOKEN, env: dict[str, str] | None = None
) -> StdioServerParameters:
    # `python -m router.cli` from the checkout: the same code in a fresh CI clone (editable .venv)
    # and in a worktree; the token in the environment, as a client's config would pass it.
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "router.cli", "stdio", "--url", url, *extra],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "MCP_ROUTER_TOKEN": token, **(env or {})},
    )


@asynccontextmanager
async def bridged_session(
    url: str,
    errlog: TextIO,
    *,
    list_roots: Callable[[Any], Awaitable[types.ListRootsResult]] | None = None,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session through a bridge process; leaving closes its stdin."""
    async with (
        stdio_client(bridge_params(url, *extra, env=env), errlog=errlog) as (read, write),
        ClientSession(read, write, list_roots_callback=list_roots,
                      client_info=types.Implementation(name=BRIDGE_CLIENT, version="1")) as session,
    ):
        await session.initialize()
        yield session


def bridged_session_id(errlog: Path) -> str:
    """The router session the bridge opened, from the line it logs on stderr."""
    found = SESSION_LINE.search(errlog.read_text())
    assert found, f"the bridge logged no session:\n{errlog.read_text()}"
    return found.group(1)
