"""What the router itself has to tell one session's client on its GET stream: resource updates and
list changes (router/catalog/), and which resources the client subscribed to.

The client's stream may be away for a moment (Claude Code reopens it ~1 s after it ends), so a
few notices wait here; past the bound the oldest go, as a stream that is never opened must not
make the router hold a session's notices without end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

MAX_PENDING: Final = 64
MAX_SUBSCRIPTIONS: Final = 256


class Outbox:
    def __init__(self) -> None:
        self.subscribed: set[str] = set()
        self.listed_tabs = 0  # tabs the client's resource list last had, to tell when it changes
        self._pending: deque[dict[str, Any]] = deque(maxlen=MAX_PENDING)
        self._ready = anyio.Event()

    def subscribe(self, uri: str) -> bool:
        """False when the session holds too many subscriptions already."""
        if uri not in self.subscribed and len(self.subscribed) >= MAX_SUBSCRIPTIONS:
            return False
        self.subscribed.add(uri)
        return True

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if message in self._pending:  # the same news twice before it went out says nothing more
            return
        self._pending.append(message)
        self._ready.set()

    def request(self, message: dict[str, Any]) -> None:
        """A request of the router's own (its id chosen by the caller), sent as it is."""
        self._pending.append(message)
        self._ready.set()

    def take(self) -> list[dict[str, Any]]:
        taken = list(self._pending)
        self._pending.clear()
        self._ready = anyio.Event()
        return taken

    async def drain(self, write: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Writes each notice as it comes, until cancelled (the stream ends)."""
        while True:
            await self._ready.wait()
            for message in self.take():
                await write(message)
