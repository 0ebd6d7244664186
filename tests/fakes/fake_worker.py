"""A small MCP server standing in for @playwright/mcp in fast tests.

Run as `python fake_worker.py PORT`; it listens on 127.0.0.1:PORT/mcp like the real worker.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("fake-worker")
_memory: dict[str, str] = {}


@server.tool()
def echo(text: str) -> str:
    return text


@server.tool()
def whoami() -> str:
    return f"pid={os.getpid()} port={sys.argv[1]}"


@server.tool()
def remember(key: str, value: str) -> str:
    _memory[key] = value
    return "ok"


@server.tool()
def recall(key: str) -> str:
    return _memory.get(key, "")


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    steps = 4
    for step in range(steps):
        await ctx.report_progress(step, steps, f"step {step}")
        await anyio.sleep(seconds / steps)
    return "done"


@server.tool()
async def roots(ctx: Context) -> str:
    result = await ctx.session.list_roots()
    return ",".join(str(root.uri) for root in result.roots)


@server.tool()
async def log_then_answer(ctx: Context) -> str:
    await ctx.info("working")
    return "answered"


@server.tool()
def client_params(ctx: Context) -> str:
    """The client's initialize params as this worker saw them (the router replays them)."""
    params = ctx.session.client_params
    return json.dumps(None if params is None else params.model_dump(mode="json", by_alias=True, exclude_none=True))


@server.tool()
def big(size: int) -> str:
    return "x" * size


@server.tool()
def crash() -> str:
    os._exit(3)


if __name__ == "__main__":
    port = int(sys.argv[1])
    anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=port))
