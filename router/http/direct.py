"""A POST to /mcp served without uvicorn's request cycle: the server's protocol hands the whole
request (head and body) to the /mcp chain itself, and writes its answer to the socket itself.

Every tool call is such a POST, and uvicorn's cycle cost it a measurable share of the router's
time: a scope built from a parsed URL, an ``asyncio.Event`` and a task per request, a ``receive``
that waits for the body the parser already had, and a ``send`` that runs two regular expressions
over every header the router itself wrote. Here the request starts once its body is in, as one
task, with a ``receive`` that hands the body over at once and a ``send`` that frames the answer
as uvicorn's does: by the ``Content-Length`` the app gives, else chunked.

The same ASGI chain serves it (security, auth, timing, endpoint), so nothing about what a request
may do or gets back changes; only the server's share does. Anything this lane does not take (other
paths and methods, HTTP/1.0, ``Expect``, a body past the cap, a connection already answering)
goes through uvicorn as before (``router/http/server.py`` decides).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol

from starlette.types import ASGIApp, Message, Scope
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

if TYPE_CHECKING:
    from router.http.steady import SteadyLane

__all__ = ["DirectLane", "DirectRequest"]

log = logging.getLogger("mcp_router.server")

CHUNK_END: Final = b"0\r\n\r\n"
INTERNAL_ERROR_BODY: Final = b"Internal Server Error"
INTERNAL_ERROR_HEADERS: Final = (
    (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"%d" % len(INTERNAL_ERROR_BODY)),
)
NO_BODY_STATUS: Final = frozenset({204, 304})


@dataclass(eq=False)
class DirectLane:
    """What the server's protocol serves itself: POSTs to ``path`` (exactly, without a query)
    with at most ``max_body`` bytes of body, by ``app``; ``served`` counts them."""

    path: bytes
    app: ASGIApp
    max_body: int
    served: int = 0
    steady: SteadyLane | None = None  # tried first for each request the lane takes
    path_text: str = field(init=False)  # the scope's "path": decoded once, not per request

    def __post_init__(self) -> None:
        self.path_text = self.path.decode("ascii")


class Connection(Protocol):
    """The server protocol's side, as a request served here needs it."""

    transport: Any
    flow: Any  # uvicorn's FlowControl: a client that does not read pauses the answer's writes
    logger: logging.Logger
    tasks: set[Any]  # uvicorn's: waited for when the server stops, cancelled at its graceful timeout

    def on_response_complete(self) -> None: ...


class DirectRequest:
    """One request on a connection and its answer: ASGI's ``receive`` and ``send`` for it."""

    __slots__ = (
        "_body", "_chunked", "_connection", "_default_headers", "_disconnected", "_gone", "_keep_alive", "_left",
        "response_complete", "response_started",
    )

    def __init__(
        self, connection: Connection, body: bytes, *, keep_alive: bool, default_headers: list[tuple[bytes, bytes]]
    ) -> None:
        self._connection = connection
        self._body: bytes | None = body
        self._keep_alive = keep_alive
        self._default_headers = default_headers
        self._gone: asyncio.Future[None] | None = None
        self._chunked = False
        self._left = 0  # bytes still owed under a Content-Length
        self._disconnected = False
        # Named as uvicorn's cycle names them: the server protocol reads them of either.
        self.response_started = False
        self.response_complete = False

    # -- the connection's side ----------------------------------------------------------------

    def disconnected(self) -> None:
        """The client's socket closed: ``receive`` says so, ``send`` drops what comes."""
        self._disconnected = True
        self._exchange_over()

    def _exchange_over(self) -> None:
        """Wakes a ``receive()`` waiting for the client to go: it has gone, or its answer is whole."""
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    def stop_keeping_alive(self) -> None:
        """The server is stopping: this answer is the connection's last."""
        self._keep_alive = False

    def hold(self, on_cancel: Callable[[], None]) -> Callable[[], None]:
        """A stand-in for the task of a request served in the server's callbacks (the steady
        lane): a stopping server waits for it as for its tasks, even once the client has gone,
        and cancels it at its graceful timeout (``on_cancel`` runs then). Returns the release:
        called once a task has taken the request over, or it is done."""
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tasks = self._connection.tasks
        tasks.add(held)

        def done(future: asyncio.Future[None]) -> None:
            tasks.discard(future)
            if future.cancelled():
                on_cancel()

        held.add_done_callback(done)
        return partial(_release, held)

    def abort(self) -> None:
        """Ends the answer as a failed app's: a 500 if nothing was written, else a cut."""
        self._fail()

    async def run(self, app: ASGIApp, scope: Scope) -> None:
        """As uvicorn's cycle runs an app: what it lets out is logged, never raised; the client
        gets a 500 if nothing was sent yet (``serve_guarded`` in the chain already answers one
        with a JSON-RPC body for an ``Exception``), else the connection is cut."""
        try:
            await app(scope, self.receive, self.send)
        except BaseException as exc:  # a cancelled task (the shutdown's timeout) too, as uvicorn
            self._connection.logger.error("Exception in ASGI application\n", exc_info=exc)
            self._fail()
            return
        if not self.response_complete and not self._disconnected:
            log.error("the /mcp chain returned without completing its answer")
            self._fail()

    def _fail(self) -> None:
        if self._disconnected or self.response_complete:
            return
        transport = self._connection.transport
        if not self.response_started:
            self._keep_alive = False
            transport.write(self._head(500, INTERNAL_ERROR_HEADERS) + INTERNAL_ERROR_BODY)
            self.response_complete = True
        transport.close()

    # -- ASGI --------------------------------------------------------------------------------

    async def receive(self) -> Message:
        body, self._body = self._body, None
        if body is not None:
            return {"type": "http.request", "body": body, "more_body": False}
        if not self._disconnected and not self.response_complete:
            if self._gone is None:
                self._gone = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._gone)
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        connection = self._connection
        if connection.flow.write_paused and not self._disconnected:
            await connection.flow.drain()
        if self._disconnected or self.response_complete:
            return
        transport = connection.transport
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {message['type']!r}")
            self.response_started = True
            # Written now: a streamed answer's head tells the client its call is under way (its
            # body may be minutes away). A body written in the same turn leaves with it (coalesce.py).
            transport.write(self._head(message["status"], message.get("headers", ())))
            return
        if message["type"] != "http.response.body":
            raise RuntimeError(f"expected http.response.body, got {message['type']!r}")
        self._write_body(message.get("body", b""), bool(message.get("more_body", False)))

    def answer_whole(self, status: int, headers: Any, body: bytes) -> None:
        """A whole answer, written at once (the steady lane's, which holds it in memory already:
        nothing is gained by waiting for a client that does not read)."""
        if self._disconnected or self.response_complete:
            return
        if self.response_started:
            raise RuntimeError("answer_whole after the answer started")
        self.response_started = True
        head = self._head(status, headers)
        self._connection.transport.write(head + self._framed(body, False))  # one write: one send
        self._done()

    def _write_body(self, body: bytes, more: bool) -> None:
        data = self._framed(body, more)
        if data:
            self._connection.transport.write(data)
        if not more:
            self._done()

    def _framed(self, body: bytes, more: bool) -> bytes:
        """``body`` as it goes on the wire: a chunk (and the last one), or as is under a
        Content-Length (checked against it)."""
        if self._chunked:
            if not body:
                return b"" if more else CHUNK_END
            return b"%x\r\n%b\r\n%b" % (len(body), body, b"" if more else CHUNK_END)
        if len(body) > self._left:
            raise RuntimeError("answer longer than its Content-Length")
        self._left -= len(body)
        if not more and self._left:
            raise RuntimeError("answer shorter than its Content-Length")
        return body

    # -- framing -----------------------------------------------------------------------------

    def _head(self, status: int, headers: Any) -> bytes:
        head = [STATUS_LINE[status]]
        self._left = -1  # no Content-Length given: chunked
        for name, value in (*self._default_headers, *headers):
            # The /mcp chain writes its own headers, and relays a worker's (proxy.py drops its
            # hop-by-hop ones); httptools refuses CR and LF in what it parsed, client's or worker's.
            lowered = name.lower()
            if lowered == b"content-length":
                if self._left < 0:  # the first counts, as in uvicorn's cycle
                    self._left = int(value)
            elif lowered == b"connection":
                if b"close" in value.lower():
                    self._keep_alive = False
                continue
            elif lowered == b"transfer-encoding":
                continue
            head += (lowered, b": ", value, b"\r\n")
        if status in NO_BODY_STATUS:
            self._left = 0
        if self._left < 0:
            self._chunked = True
            head.append(b"transfer-encoding: chunked\r\n")
        if not self._keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        return b"".join(head)

    def _done(self) -> None:
        self.response_complete = True
        self._exchange_over()
        connection = self._connection
        if not self._keep_alive:
            connection.transport.close()
            return
        connection.on_response_complete()


def _release(held: asyncio.Future[None]) -> None:
    if not held.done():
        held.set_result(None)
