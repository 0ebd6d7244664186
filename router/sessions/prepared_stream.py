"""The GET stream of a warm worker's prepared session that declares ``roots``, held by the router
until a client takes the session over.

With ``roots`` declared, @playwright/mcp asks ``roots/list`` on the session's GET stream at its
first tool call and only then attaches the session to its browser (~50 ms here), and once a GET
stream has been open it pings every 3 s and closes the session when a ping goes unanswered for
5 s. So the pool holds the stream: it answers ``roots/list`` with the roots the last client gave
(router/sessions/roots.py) and every ping, which lets the prepared session make its first call
before any client asks. The session is handed over only to a client whose roots are the same,
and the stream with it, still open: the holder reads and answers on until the client's GET
stream takes it (``take``), which relays it from where the holder stopped reading. A stream
closed and reopened would drop a ping sent in between, and one left unread (a resume's restore
runs between the hand-over and the relay) would leave one unanswered: either way the worker
closes the session 5 s later.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import anyio

from router.protocol.sse import EventSplitter, EventTooLarge, event_json
from router.sessions.control import ControlError, ControlSession
from router.sessions.roots import ROOTS_METHOD, Roots, declares_roots
from router.upstream.client import UpstreamError, UpstreamResponse

if TYPE_CHECKING:
    from router.sessions.table import Session

log = logging.getLogger("mcp_router.pool")

METHOD_NOT_FOUND: Final = -32601
# A reader that does not stop within this (its task never ran) gives the session up instead.
HAND_OVER_WAIT: Final = 1.0
# How long a client's GET stream may lag behind its first call (Claude Code opens it right after
# notifications/initialized, before tools/list).
STREAM_GRACE: Final = 0.5
# How long the router waits for a client's answer to its roots/list before making a session's
# first calls itself: no longer than the worker would wait for a GET stream to ask on.
ROOTS_ANSWER_WAIT: Final = 5.0


@dataclass(frozen=True, slots=True)
class AdoptedStream:
    """A worker's GET stream handed to a client's: ``rest`` was read but not yet relayed."""

    upstream: UpstreamResponse
    rest: bytes


class PreparedStream:
    """``open()``, then ``run()`` in a task of its own, then ``take()`` or ``close()``."""

    def __init__(self, session: ControlSession, roots: Roots) -> None:
        self.session = session
        self.roots = roots
        self._upstream: UpstreamResponse | None = None
        self._splitter = EventSplitter()
        self._scope = anyio.CancelScope()
        self._stopped = anyio.Event()
        self._broken = False

    @property
    def alive(self) -> bool:
        return self._upstream is not None and not self._broken

    async def open(self) -> None:
        self._upstream = await self.session.open_stream()

    async def run(self) -> None:
        """Reads the stream and answers what the worker asks, until handed over or closed.
        Only ever stopped while waiting for bytes: what it read and did not handle stays in the
        splitter, for the client's stream to relay."""
        upstream = self._upstream
        try:
            if upstream is None:
                return
            with self._scope:
                async for chunk in upstream.aiter_raw():
                    try:
                        events = self._splitter.feed(chunk)
                    except EventTooLarge as exc:
                        events = exc.events
                    for event in events:
                        await self._answer(event_json(event))
                self._broken = True  # the worker ended it: the session is no use any more
        except UpstreamError:
            self._broken = True
        finally:
            self._stopped.set()

    async def _answer(self, message: Any) -> None:
        if not (isinstance(message, dict) and "method" in message and "id" in message):
            return  # a notification (tools/list_changed): nothing to answer
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if message["method"] == ROOTS_METHOD:
            reply["result"] = {"roots": self.roots}
        elif message["method"] == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": METHOD_NOT_FOUND, "message": f"Method not found: {message['method']}"}
        # Shielded: a hand-over must not cut an answer the worker is waiting for.
        with anyio.CancelScope(shield=True):
            try:
                await self.session.answer(reply)
            except ControlError as exc:
                log.debug("prepared session's answer refused: %s", exc)

    async def hand_over_to(self, session: Session, wait: float) -> bool:
        """Whether ``session``'s client may have this stream and its prepared session: its GET
        stream is open to relay it, and its roots (awaited ``wait`` s) are the ones this
        session's first call was made with. If not, closed, and the caller lets the prepared
        session go too. When it may, the stream is read and answered on until the client's
        stream takes it (``take``)."""
        roots = session.roots.known  # a session that resumes has had them since its stream opened
        if roots is None and session.stream.held:
            with anyio.move_on_after(wait):
                roots = await session.roots.answered()
        same = roots is not None and roots == self.roots and session.stream.held and self.alive
        if not same:
            log.info(
                "warm worker's prepared session not handed over session=%s stream=%s roots=%s",
                session.id, "open" if session.stream.held else "absent",
                "unknown" if roots is None else ("same" if roots == self.roots else "different"),
            )  # fmt: skip
            await self.close()
        return same

    async def take(self) -> AdoptedStream | None:
        """Stops reading and gives the open stream away (None: it has ended already)."""
        self._scope.cancel()
        with anyio.move_on_after(HAND_OVER_WAIT):
            await self._stopped.wait()
        upstream, self._upstream = self._upstream, None
        if upstream is None or self._broken or not self._stopped.is_set():
            if upstream is not None:
                await upstream.aclose()
            return None
        return AdoptedStream(upstream, self._splitter.rest())

    async def close(self) -> None:
        self._scope.cancel()
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            await upstream.aclose()


async def wait_for_stream(session: Session) -> bool:
    """Whether the client's GET stream is open, given ``STREAM_GRACE`` to open."""
    if not session.stream.held:
        with anyio.move_on_after(STREAM_GRACE):
            await session.stream.opened()
    return session.stream.held


async def hold_for_streamless(
    session: Session, replay: ControlSession, *, waited: bool,
    start_soon: Callable[[Callable[[], Awaitable[Any]]], None], for_router_calls: bool = False,
) -> PreparedStream | None:
    """The worker's GET stream, held by the router for a client that declares ``roots`` but has
    no GET stream of its own (after ``STREAM_GRACE``, unless ``waited`` already). The worker asks
    ``roots/list`` only on a GET stream: without one it waits 5 s, asks into nothing and waits
    60 s more for the answer (@playwright/mcp 0.0.83, measured). Held, its question is answered
    with the client's roots when the router has them (the client answered them earlier in the
    session: a resume while its stream is away), else with none (where the worker ends up
    anyway, a minute later: its own cwd), and its pings are answered, until a GET stream of the
    client's takes the stream over.

    ``for_router_calls``: held whether the client has a stream or not, as the router is about to
    make the session's first calls itself (a restore through the client's own session on a
    shared worker, hosts.py): the client's stream relays the session only once it is bound."""
    if not declares_roots(session.initialize_params) or (session.stream.held and not for_router_calls):
        return None
    if not waited and await wait_for_stream(session):
        return None
    roots = session.roots.known
    if roots is None and for_router_calls and session.stream.held:  # asked on that stream: answered soon
        with anyio.move_on_after(ROOTS_ANSWER_WAIT):
            roots = await session.roots.answered()
    held = PreparedStream(replay, roots if roots is not None else session.roots.known_or_empty())
    try:
        await held.open()
    except ControlError as exc:
        log.info("no stream held for a client without one session=%s: %s", session.id, exc)
        return None
    start_soon(held.run)
    return held


async def close_prepared(client: ControlSession | None, stream: PreparedStream | None) -> None:
    """The worker forgets a prepared session nobody will use (and stops pinging it)."""
    if stream is not None:
        await stream.close()
    if client is not None:
        await client.close()


@dataclass(frozen=True, slots=True)
class HandOver:
    prepared: ControlSession | None  # the client's own session on the warm worker; None: replay
    held: PreparedStream | None  # its GET stream, the client's from now on
    waited: bool  # the client's GET stream was given its chance to open (or could not open yet)


async def hand_over(
    session: Session, prepared: ControlSession, stream: PreparedStream | None, *, wait: float, resuming: bool,
    start_soon: Callable[[Callable[[], Awaitable[Any]]], None],
) -> HandOver:
    """What of a warm worker's prepared session ``session``'s client takes: the session when it
    was opened with the client's own initialize params; when its first call was made with roots
    (``stream``), only together with that stream, if the client's GET stream is open (given
    ``STREAM_GRACE``, not on a resume: there it is open or not) and its roots (awaited ``wait``
    s) are the same. What is not taken is closed: the worker forgets it.

    On a resume too: one resume alone measured no faster for it, but ten at once on two cores
    are, since each replayed session costs its worker an attach to the browser and a roots/list
    at the first call (scripts/bench --only resumes)."""
    usable = prepared.opened_with == (session.initialize_params or None)
    held = None
    waited = False
    if usable and stream is not None:
        if wait > 0 and not resuming:  # wait 0: at initialize, no stream can be open yet
            await wait_for_stream(session)
        # On a resume nothing was waited for: a client's stream reopening then (after a router
        # restart) still gets its grace before hold_for_streamless holds one for it (with no
        # roots after a restart: the router has not asked them yet). At initialize (wait 0)
        # none can open before the answer: no grace is owed there.
        waited = not resuming
        usable = await stream.hand_over_to(session, wait)
        held = stream if usable else None
    elif stream is not None:
        start_soon(stream.close)
        usable = False
    if not usable:
        start_soon(prepared.close)  # another client's shape or roots
    return HandOver(prepared if usable else None, held, waited)
