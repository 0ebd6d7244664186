"""The bridge as a process: the SDK's stdio transport on one side, the router on the other.

stdin is read by a daemon thread rather than the SDK's own reader (a worker thread that cannot be
abandoned): on SIGTERM the bridge must still DELETE its session and exit while stdin stays open.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Final, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.server.stdio import stdio_server

from router.bridge.relay import Relay
from router.bridge.upstream import HTTP_TIMEOUT, RouterLink

log = logging.getLogger("mcp_router.stdio")

STDIN_FD: Final = 0
READ_SIZE: Final = 64 * 1024


async def bridge(url: str, token: str | None, conversation: str | None = None) -> None:
    """Serve MCP on stdin/stdout, forwarding to the router at ``url``, until stdin ends or a signal.
    ``conversation``: the key of the client's conversation (its browser comes back with it)."""
    async with (
        httpx.AsyncClient(timeout=HTTP_TIMEOUT, trust_env=False) as client,
        _stdin_lines() as lines,
        stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (inbound, outbound),
    ):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_stop_on_signal, tasks.cancel_scope)
            async with outbound:
                # Relay.run DELETEs the session however it ends (stdin closed, or a signal).
                await Relay(RouterLink(client, url, token, conversation=conversation), outbound).run(inbound)
            tasks.cancel_scope.cancel()
        lines.close()  # after a signal, the transport's reader still waits on stdin: release it


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _ in signals:
            scope.cancel()
            return


@asynccontextmanager
async def _stdin_lines() -> AsyncIterator[MemoryObjectReceiveStream[str]]:
    """stdin's lines (stdio_server only iterates its ``stdin``), fed by a daemon thread."""
    send, receive = anyio.create_memory_object_stream[str](0)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        # RuntimeError: the event loop is gone; Closed/BrokenResourceError: the bridge stopped
        # listening. Anything else is logged. Whatever happened, the end of stdin is told, or
        # the transport's reader would wait for it forever.
        try:
            pending = b""
            while chunk := _read_stdin():
                *lines, pending = (pending + chunk).split(b"\n")
                for line in filter(bytes.strip, lines):  # blank lines are no messages
                    anyio.from_thread.run(send.send, line.decode("utf-8", "replace"), token=token)
            if pending.strip():
                anyio.from_thread.run(send.send, pending.decode("utf-8", "replace"), token=token)
        except (RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        except Exception:
            log.exception("reading stdin failed")
        finally:
            with suppress(RuntimeError):
                anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=pump, name="stdin", daemon=True).start()
    async with receive:
        yield receive


def _read_stdin() -> bytes:
    """Plain reads of fd 0: sys.stdin's buffered reader holds a lock that a thread still blocked
    in it after a signal would keep from the interpreter's shutdown (a fatal error)."""
    while True:
        try:
            return os.read(STDIN_FD, READ_SIZE)
        except BlockingIOError:  # a client may hand over a non-blocking pipe or socket
            select.select([STDIN_FD], [], [])
