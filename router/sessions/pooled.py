"""One warm worker of the pool (pool.py), and the tool call that keeps its browser up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import anyio

from router.sessions.control import ControlSession
from router.sessions.prepared_stream import PreparedStream
from router.upstream.connection import WorkerConnection
from workers.supervisor import Worker

WARM_TOOL: Final = "browser_tabs"  # launches the browser; lists the about:blank tab
WARM_ARGS: Final = {"action": "list"}
# What keeps a waiting worker warm (pool.py, keep_warm): a snapshot of its about:blank tab, read
# only, ~10-25 ms of CPU between node and the browser.
POKE_TOOL: Final = "browser_snapshot"
POKE_ARGS: Final[dict[str, str]] = {}


@dataclass(eq=False)
class Pooled:
    """One warm worker (or one on its way there)."""

    id: str
    worker: Worker | None = None
    connection: WorkerConnection | None = None
    control: ControlSession | None = None
    # The next client's MCP session, opened ahead with the last client's initialize (see prepare).
    client: ControlSession | None = None
    # Its GET stream, held while the client's roots answer the worker (a shape with ``roots``).
    stream: PreparedStream | None = None
    browser: bool = False  # the worker has the browser tools (a stand-in worker has none)
    ready: bool = False
    started: bool = False  # holds a bring-up slot: spawning or launching, not queued
    warmed_at: float = 0.0  # monotonic; last tool call that kept the browser up
    poking: bool = False  # a keep-warm call is on its way: taken only when no other one is ready
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)  # filling finished, either way
