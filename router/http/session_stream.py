"""The client's GET stream, which belongs to the session and not to a worker.

It stays open (keep-alives only) while the session has no worker, and whenever the session gets
one (first use, resume after a reap, a crash, a hibernation or a router restart,
``create_new_session``), or a new MCP session on the same worker (which had forgotten the
client's), it is joined to that worker session's own stream at once, leaving the old one, so
the worker's pings and ``roots/list`` reach the client before its first call needs the answer.
No worker is ever spawned for a GET. A new GET from the client takes over from an old one it has
given up on; the worker's own stream goes on to the new one untouched (a worker accepts one stream
per session, and what it wrote while its stream was closing would be lost: a ``roots/list`` that its
tool call then waits for in vain). The worker's requests reach the client under
ids of the session's own (router/sessions/asked.py). A worker session the worker ended (its GET
answered 404) is noted at once: the next request reopens one instead of waiting for this relay.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
from starlette.types import Receive, Scope, Send

from router.http.one_way import SESSION_LOST
from router.http.streaming import Writer, run_stream, send_start
from router.protocol.sse import KEEPALIVE_COMMENT, EventSplitter, EventTooLarge, encode_event, event_id, event_json
from router.sessions.table import ENDED, ParkedStream, Session
from router.types import CANCELLED, H_SESSION_ID, SSE_HEADERS
from router.upstream.client import UpstreamError
from router.upstream.connection import WorkerConnection, upstream_headers

log = logging.getLogger("mcp_router.streams")

# A worker's GET stream that ended while the worker lives on is reopened at most once per this.
STREAM_REOPEN_DELAY: Final = 1.0
# What every event that is a request (its "id") or a cancel holds, found without parsing it.
_ID_MARK: Final = b'"id"'
_CANCEL_MARK: Final = CANCELLED.encode()


class SessionStream:
    def __init__(self, *, keepalive_interval: float, stopping: anyio.Event) -> None:
        self.keepalive_interval = keepalive_interval
        self.stopping = stopping

    async def serve(self, session: Session, scope: Scope, receive: Receive, send: Send) -> None:
        with anyio.CancelScope() as cancel:
            await session.stream.claim(cancel)
            session.ask_roots()  # before any worker asks, so a warm worker can be warmed with them
            try:
                await send_start(send, 200, [(H_SESSION_ID.encode(), session.id.encode()), *SSE_HEADERS])
                writer = Writer(send)
                await writer(KEEPALIVE_COMMENT)
                await run_stream(
                    receive,
                    writer,
                    self._follow(session, scope, writer),
                    keepalive=self.keepalive_interval,
                    stop=self.stopping,
                )
            finally:
                session.roots.stream_lost()
                session.stream.release(cancel)
        # Taken over, ended or stopped: the body ends either way (the client may be gone already).
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b""})

    async def _follow(self, session: Session, scope: Scope, writer: Writer) -> None:
        """The workers' streams, and the router's own notices from the session's outbox."""

        async def notice(message: dict[str, Any]) -> None:
            await writer(encode_event(json.dumps(message).encode()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(session.outbox.drain, notice)
            await self._follow_workers(session, scope, writer)
            tg.cancel_scope.cancel()

    async def _follow_workers(self, session: Session, scope: Scope, writer: Writer) -> None:
        """Relays each worker's GET stream into the client's while the session lives: keep-alives
        only while it has none, and no worker is ever spawned for a GET."""
        while session.state not in ENDED:
            changed = session.worker_changed
            connection, worker_session_id = session.connection, session.worker_session_id
            if connection is not None and worker_session_id is not None:
                began = anyio.current_time()
                await self._relay_worker_stream(session, scope, connection, worker_session_id, writer)
                if session.knows_worker_session_lost:
                    await changed.wait()  # nothing to relay until a request reopens one
                elif session.connection is connection:
                    # The worker lives on: tried again at once after a stream that stood (the
                    # worker may have ended its session: the 404 says so before the next request
                    # waits for a relay), but not more often than this, so as not to spin.
                    with anyio.CancelScope(deadline=began + STREAM_REOPEN_DELAY):
                        await changed.wait()
                continue
            async with anyio.create_task_group() as tg:

                async def on_gone() -> None:
                    await session.gone.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(on_gone)
                await changed.wait()
                tg.cancel_scope.cancel()

    async def _relay_worker_stream(
        self, session: Session, scope: Scope, connection: WorkerConnection, worker_session_id: str, writer: Writer
    ) -> None:
        parked = session.take_parked_stream(connection, worker_session_id)
        held = session.take_adopted_stream(connection) if parked is None else None  # prepared_stream.py
        adopted = await held.take() if held is not None else None
        if parked is not None:
            upstream, rest = parked.upstream, parked.rest
        elif adopted is not None:
            upstream, rest = adopted.upstream, adopted.rest
        else:
            headers = upstream_headers(
                scope["headers"], host=connection.host_header, worker_session_id=worker_session_id
            )
            try:
                upstream = await connection.send("GET", headers)
            except UpstreamError:
                return
            rest = b""
        ready: anyio.Event | None = None
        carry = _Carry(EventSplitter(), [rest] if rest else [])
        try:
            if upstream.status_code != 200:
                log.debug("worker refused the GET stream session=%s status=%d", session.id, upstream.status_code)
                if upstream.status_code == SESSION_LOST and session.connection is connection:
                    session.worker_session_lost(worker_session_id)
                return
            if session.connection is connection and session.worker_session_id == worker_session_id:
                ready = session.relay_ready
                ready.set()
            failure: list[Exception] = []
            async with anyio.create_task_group() as tg:

                async def leave_when_switched() -> None:
                    await _switched_from(session, connection, worker_session_id)
                    tg.cancel_scope.cancel()

                tg.start_soon(leave_when_switched)
                try:
                    chunks = _after(rest, upstream.aiter_raw())  # rest: in ``carry`` until fed
                    await _relay_events(session, connection, worker_session_id, chunks, writer, carry)
                except UpstreamError:
                    pass  # the worker went away: the client's stream stays, waiting for the next one
                except Exception as exc:  # re-raised outside the task group, unwrapped
                    failure.append(exc)
                tg.cancel_scope.cancel()
            if failure:
                raise failure[0]
        finally:
            if (
                session.stream.taking_over
                and upstream.status_code == 200
                and session.connection is connection
                and session.worker_session_id == worker_session_id
            ):
                session.parked_stream = ParkedStream(connection, worker_session_id, upstream, carry.rest())
            else:
                await upstream.aclose()
            if ready is not None and session.relay_ready is ready:
                # No relay stands any more (taken over, or the worker's stream ended): the next
                # request waits for the next one, or the worker would ask into a closed stream.
                session.relay_ready = anyio.Event()


@dataclass(slots=True)
class _Carry:
    """What a relay read of a worker's stream and has not written to the client yet."""

    splitter: EventSplitter
    unsent: list[bytes] = field(default_factory=list)  # as the worker sent them, not yet fed or written

    def rest(self) -> bytes:
        return b"".join(self.unsent) + self.splitter.rest()


async def _relay_events(
    session: Session, connection: WorkerConnection, worker_session_id: str, chunks: AsyncIterator[bytes],
    writer: Writer, carry: _Carry,
) -> None:
    """A worker's stream, whole events, into the client's; the worker's requests under ids of the
    session's own (router/sessions/asked.py), so that the client's answers go back to the worker
    session that asked, and only to it."""
    splitter = carry.splitter
    async for chunk in chunks:
        try:
            events = splitter.feed(chunk)
        except EventTooLarge as exc:  # dropped whole; the events before it still go
            log.warning("dropped an oversized event on session=%s's stream: %s", session.id, exc)
            events = exc.events
        carry.unsent = events
        if not events:
            continue
        # Parsed only when it may be a request or a cancel of one; the rest goes as it came.
        relayed = [
            _renumbered(session, connection, worker_session_id, event)
            if _ID_MARK in event or _CANCEL_MARK in event
            else event
            for event in events
        ]
        # Cut short only before a write or after it, never within: uvicorn writes a body
        # whole once it stops waiting for the socket, so the client never gets half an event,
        # and events a take-over cut off go to the next stream (``carry``).
        await writer(b"".join(relayed))
        carry.unsent = []


def _renumbered(session: Session, connection: WorkerConnection, worker_session_id: str, event: bytes) -> bytes:
    """``event`` with the worker's request id (or the one its cancel names) replaced by the id the
    client sees; unchanged when it is neither."""
    payload = event_json(event)
    if not (isinstance(payload, dict) and session.asked.renumber(payload, connection, worker_session_id)):
        return event
    return encode_event(json.dumps(payload).encode(), event_id(event))


async def _switched_from(session: Session, connection: WorkerConnection, worker_session_id: str) -> None:
    """Returns once the session has left this worker session: another worker, none, or a new
    session on the same worker (reopened after the worker forgot this one). The worker may keep
    this one's stream open, but asks the client nothing more on it that anyone waits for."""
    while session.connection is connection and session.worker_session_id == worker_session_id:
        await session.worker_changed.wait()


async def _after(first: bytes, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``first`` (when not empty), then ``chunks``."""
    if first:
        yield first
    async for chunk in chunks:
        yield chunk
