"""A small MCP server standing in for @playwright/mcp in fast tests.

Run as `python fake_worker.py PORT`; it listens on 127.0.0.1:PORT/mcp like the real worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer

POLL_S = 0.01  # reset_then_exit's checks: for the test's go-ahead, then for a request to reset
RESET_WAIT = 10.0  # longer than any test waits for the request it sends
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


@server.tool()
async def reset_then_exit(exit_after: float, go: str, frozen: str) -> str:
    """Dies as a SIGKILLed worker can: once the test has this answer (it creates the file ``go``),
    nothing is read any more (the file ``frozen`` says so), the next request on a kept-alive
    socket is reset while the listener still accepts, and the process exits ``exit_after``
    seconds later."""
    loop = asyncio.get_running_loop()

    def freeze_once_told() -> None:
        if not Path(go).exists():
            loop.call_later(POLL_S, freeze_once_told)
            return
        threading.Thread(target=_reset_then_exit, args=(exit_after,), daemon=True).start()
        Path(frozen).touch()
        time.sleep(exit_after + RESET_WAIT)  # the event loop stops here; the kernel still accepts

    loop.call_later(POLL_S, freeze_once_told)
    return "dying"


def _connected_sockets() -> list[tuple[int, socket.socket]]:
    """This process's TCP connections (not its listener), each as (fd, a duplicate to inspect)."""
    found: list[tuple[int, socket.socket]] = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in {sock.fileno() for _, sock in found}:
            continue  # the listing's own descriptor, closed since and reused for a duplicate
        try:
            copy = os.dup(fd)
        except OSError:
            continue  # the listing's own descriptor, closed by now
        try:
            sock = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)
            continue  # not a socket
        if sock.family == socket.AF_INET and not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            found.append((fd, sock))
        else:
            sock.close()
    return found


def _has_unread(sock: socket.socket) -> bool:
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:
        return False


def _reset_then_exit(exit_after: float) -> None:
    deadline = time.monotonic() + RESET_WAIT
    while time.monotonic() < deadline:
        sockets = _connected_sockets()
        waiting = any(_has_unread(sock) for _, sock in sockets)
        for fd, sock in sockets:
            if waiting:  # linger 0: closing the socket's last descriptor sends a reset
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                os.close(fd)
            sock.close()
        if waiting:
            break
        time.sleep(POLL_S)
    else:  # in the worker's stderr tail, which the router's 502 carries
        sys.stderr.write("reset_then_exit: no request came to reset\n")
    time.sleep(exit_after)
    os._exit(3)


if __name__ == "__main__":
    port = int(sys.argv[1])
    anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=port))
