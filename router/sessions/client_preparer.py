"""The next client's MCP session, opened ahead on each ready warm worker (pool.py) in the last
client's initialize shape, and with the last client's roots (its GET stream held, see
prepared_stream.py), so that a new conversation's first call does not pay for one."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from router.sessions.control import ControlError, ControlSession
from router.sessions.pooled import WARM_ARGS, WARM_TOOL, Pooled
from router.sessions.prepared_stream import PreparedStream, close_prepared
from router.sessions.roots import Roots, declares_roots

log = logging.getLogger("mcp_router.pool")


class ClientPreparer:
    def __init__(self, *, start_soon: Callable[[Callable[[], Awaitable[Any]]], None]) -> None:
        self.start_soon = start_soon
        self._shape: dict[str, Any] | None = None  # the last client's initialize params
        self._roots: Roots | None = None  # the roots the last client that declared any gave

    def expect(self, initialize_params: dict[str, Any]) -> None:
        """The shape of the next client's ``initialize`` (the last one seen)."""
        if initialize_params:
            self._shape = dict(initialize_params)  # taken up by the refill task's next round

    def expect_roots(self, roots: Roots) -> bool:
        """The roots of the next client that declares ``roots`` (the last ones seen). True when
        they changed."""
        if roots != self._roots:
            self._roots = list(roots)
            return True
        return False

    async def open_client(self, entry: Pooled) -> tuple[ControlSession | None, PreparedStream | None]:
        """An MCP session opened with the last client's initialize params, to be handed to the
        next client whose params are the same (Continuity.attach). It also makes one tool call:
        the worker attaches a session to its browser at the session's first call (~50 ms here),
        and that is then spent already. With ``roots`` the worker asks them at that call: the
        pool holds the session's GET stream and answers with the last client's roots, and the
        session goes only to a client with the same (without known roots it makes no call).
        None when there is no shape yet or the worker refused."""
        shape, connection, roots = self._shape, entry.connection, self._roots
        if shape is None or connection is None or entry.worker is None:
            return None, None
        client = ControlSession(connection)
        stream: PreparedStream | None = None
        try:
            await client.open(shape)
            if declares_roots(shape) and roots is not None and entry.browser:
                stream = PreparedStream(client, roots)
                await stream.open()
                self.start_soon(stream.run)
            if entry.browser and (stream is not None or not declares_roots(shape)):
                await client.call(WARM_TOOL, WARM_ARGS)
        except ControlError as exc:
            log.info("warm worker's client session not prepared id=%s: %s", entry.id, exc)
            await close_prepared(client, stream)  # the worker must not keep a session nobody uses
            return None, None
        return client, stream

    async def refresh(self, ready: list[Pooled], still_pooled: Callable[[Pooled], bool]) -> None:
        """Ready workers whose prepared session no longer matches the last client's shape get a
        new one (the old one is closed: the worker keeps no session nobody will use)."""
        for entry in ready:
            old, old_stream = entry.client, entry.stream
            if self._shape is None or (old is not None and old.opened_with == self._shape and self._warmed(entry)):
                continue
            client, stream = await self.open_client(entry)
            if not still_pooled(entry):  # taken meanwhile: that attach replays
                await close_prepared(client, stream)
                continue
            entry.client, entry.stream = client, stream
            await close_prepared(old, old_stream)

    def _warmed(self, entry: Pooled) -> bool:
        """The prepared session made its first call with the roots the next client should have
        (trivially, without ``roots`` or before any roots are known)."""
        if not declares_roots(self._shape) or self._roots is None or not entry.browser:
            return True
        return entry.stream is not None and entry.stream.alive and entry.stream.roots == self._roots
