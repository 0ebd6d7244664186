"""The client's roots, asked by the router itself as soon as the client's GET stream opens.

@playwright/mcp asks ``roots/list`` once per MCP session, at its first tool call, and only then
attaches that session to its browser (~50 ms here): a client that declares ``roots`` pays both on
its first call. Knowing the client's roots before that call lets a warm worker's prepared session
make its first call ahead of time with the same roots (router/sessions/prepared_stream.py), and
hand it over only when they are the same. The question goes on the client's GET stream (where
Claude Code answers it by POST) under an id of the router's own, and its answer never reaches a
worker. ``notifications/roots/list_changed`` (the spec: a client that declared ``listChanged``
sends it when its roots change) forgets the answer; the next GET stream asks again.

@playwright/mcp asks ``roots/list`` once per MCP session and ignores ``list_changed``: a worker
session opened before a change works in the old roots until it is replaced (``worker_behind``).

The roots the client gave last outlive a restart of the router (``session.json``,
router/sessions/statefiles.py): a session taken up again knows them before the client's stream
is back, and asks again once it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import anyio

from router.sessions.asked import issued_ids

ROOTS_METHOD: Final = "roots/list"
ROOTS_CHANGED: Final = "notifications/roots/list_changed"
# Ids the router puts on its own questions to a client; a worker's are integers.
ROUTER_ID_PREFIX: Final = "mcp-router-roots-"

Roots = list[dict[str, Any]]


def roots_of(value: object) -> Roots | None:
    """``value`` when it is a list of roots (objects, each with a string ``uri``), else None: a
    client's answer, or what a file says one was (@playwright/mcp fails every call of a session
    whose roots name no URI)."""
    if isinstance(value, list) and all(isinstance(r, dict) and isinstance(r.get("uri"), str) for r in value):
        return value
    return None


def declares_roots(initialize_params: dict[str, Any] | None) -> bool:
    capabilities = (initialize_params or {}).get("capabilities")
    return isinstance(capabilities, dict) and "roots" in capabilities


class ClientRoots:
    """One session's view of its client's roots: unknown, asked, known, or refused."""

    def __init__(self) -> None:
        self.known: Roots | None = None
        # The roots the client gave last, kept through a change until it answers again: what
        # session.json keeps.
        self.last: Roots | None = None
        self._asked: str | None = None  # the id of our question still unanswered
        self._settled = anyio.Event()  # set once the client answered (roots, or an error)
        self._ids = issued_ids(ROUTER_ID_PREFIX)  # never one this session used before, restarts included
        self._on_new: Callable[[], None] | None = None
        self._changes = 0  # notifications/roots/list_changed so far
        self._worker_saw = 0  # how many of them had come when the worker's session was opened

    def on_new(self, callback: Callable[[], None]) -> None:
        """``callback`` runs whenever an answer brings roots other than the last ones (once per
        change, never per call: a client's roots rarely change)."""
        self._on_new = callback

    def restore(self, roots: Roots) -> None:
        """The roots the client gave a previous run of the router: known, so a worker that asks
        before the client's stream is back gets them, but not settled, so the client is asked
        again once its stream opens (they may have changed while the router was away)."""
        self.known = self.last = roots

    @property
    def pending(self) -> bool:
        return self._asked is not None

    def known_or_empty(self) -> Roots:
        """What the router answers a worker's ``roots/list`` with for a client that cannot be
        asked now (its stream away): the roots it answered last, else none. After a change it
        has not been asked about yet, the ones before it: most changes add a directory, and none
        would leave the worker in its own cwd; once the client answers again, roots other than
        these renew the worker's session (``on_new``)."""
        if self.known is not None:
            return self.known
        return [] if self.last is None else self.last

    def question(self) -> dict[str, Any] | None:
        """The request to send the client now, or None (answered already, or asked already)."""
        if self._settled.is_set() or self._asked is not None:
            return None
        self._asked = next(self._ids)
        return {"jsonrpc": "2.0", "id": self._asked, "method": ROOTS_METHOD}

    def take_answer(self, request_id: Any, body: dict[str, Any]) -> bool:
        """True when ``body`` answers one of our questions (it is then ours, not a worker's)."""
        if not (isinstance(request_id, str) and request_id.startswith(ROUTER_ID_PREFIX)):
            return False
        if request_id == self._asked:
            self._asked = None
            result = body.get("result")
            roots = roots_of(result.get("roots") if isinstance(result, dict) else None)
            if roots is not None:
                self.known = roots
                if roots != self.last:
                    self.last = roots
                    if self._on_new is not None:
                        self._on_new()
            self._settled.set()
        return True  # a stale answer of ours (asked before a change) is dropped too

    def worker_opened(self) -> None:
        """A worker session was opened for the client now: it takes the roots as they are now."""
        self._worker_saw = self._changes

    @property
    def worker_behind(self) -> bool:
        """The client's roots changed since its worker session was opened: that session works in
        the old ones (@playwright/mcp asks at its first call only) until a new one replaces it."""
        return self._worker_saw != self._changes

    def changed(self) -> None:
        """The client's roots changed: what we knew is stale, and so is a question in flight."""
        self._changes += 1
        self.known = None
        self._asked = None
        if self._settled.is_set():
            self._settled = anyio.Event()

    def stream_lost(self) -> None:
        """The stream that carried our question ended: ask again on the next one."""
        self._asked = None

    async def answered(self) -> Roots | None:
        """The roots, once the client has answered (None: it answered with an error)."""
        await self._settled.wait()
        return self.known
