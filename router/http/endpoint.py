"""POST/GET/DELETE on /mcp: the protocol's rules and status codes, and the streams both ways."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Final
from urllib.parse import parse_qs

import anyio
import httpx
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from router.http.errors import (
    BadRequest,
    MethodNotAllowed,
    NotAcceptable,
    PayloadTooLarge,
    RouterError,
    UnsupportedMediaType,
    UnsupportedVersion,
    WorkerUnreachable,
    error_body,
)
from router.http.exchange import Exchange
from router.http.messages import ClientMessage, Kind, parse
from router.http.proxy import WorkerConnection, downstream_headers, upstream_headers
from router.http.sse import KEEPALIVE_COMMENT, EventSplitter, encode_event
from router.sessions.manager import SessionManager
from router.sessions.table import Session, State
from router.types import (
    H_CONTENT_LENGTH,
    H_PROTOCOL_VERSION,
    H_SESSION_ID,
    HANDSHAKE_VERSIONS,
    JSON,
    SSE,
    SSE_HEADERS,
)

log = logging.getLogger("mcp_router.endpoint")

ALLOWED_METHODS: Final = "GET, POST, DELETE"
RESPONSE_MODES: Final = frozenset({"full", "compact"})
WORKER_ERROR_EXCERPT: Final = 500


class McpEndpoint:
    def __init__(
        self, manager: SessionManager, *, max_body_bytes: int, keepalive_interval: float, response_mode: str
    ) -> None:
        self.manager = manager
        self.max_body_bytes = max_body_bytes
        self.keepalive_interval = keepalive_interval
        self.response_mode = response_mode

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        try:
            if method == "POST":
                await self._post(scope, receive, send)
            elif method == "GET":
                await self._get(scope, receive, send)
            elif method == "DELETE":
                await self._delete(scope, receive, send)
            else:
                raise MethodNotAllowed(f"Method {method} not allowed", headers={"Allow": ALLOWED_METHODS})
        except RouterError as exc:
            await exc.response(getattr(exc, "request_id", None))(scope, receive, send)

    # -- POST ---------------------------------------------------------------------------------

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != JSON:
            raise UnsupportedMediaType(f"Unsupported Media Type: Content-Type must be {JSON}")
        if not _accepts(headers, JSON, SSE):
            raise NotAcceptable(f"Not Acceptable: Accept must list {JSON} and {SSE}")
        message = parse(await self._read_body(headers, receive))
        try:
            session = await self._session_for(scope, headers, message)
            if message.kind is not Kind.REQUEST:
                await self._forward_one_way(session, scope, message, send)
                return
            # Resumes a dormant session (new worker, replayed handshake, restored browser) first.
            async with self.manager.serving(session, message):
                await self._forward_request(session, scope, receive, send, message)
        except RouterError as exc:
            exc.request_id = message.id
            raise

    async def _session_for(self, scope: Scope, headers: Headers, message: ClientMessage) -> Session:
        session_id = headers.get(H_SESSION_ID)
        if session_id is None:
            if message.method != "initialize":
                # Also what a 2026-07-28 client's server/discover probe gets, so it falls back.
                raise BadRequest("Bad Request: Mcp-Session-Id header is required; send initialize first")
            return await self.manager.open(message, response_mode=self._response_mode(scope))
        session = await self.manager.lookup(session_id)
        if message.method == "initialize":
            raise BadRequest("Invalid Request: session already initialized")
        version = headers.get(H_PROTOCOL_VERSION)
        if version is not None and version not in HANDSHAKE_VERSIONS:
            raise UnsupportedVersion(
                f"Bad Request: unsupported MCP-Protocol-Version {version!r}",
                data={"supported": sorted(HANDSHAKE_VERSIONS)},
            )
        return session

    def _response_mode(self, scope: Scope) -> str:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        mode: str = query.get("responses", [self.response_mode])[-1]
        if mode not in RESPONSE_MODES:
            raise BadRequest(f"Bad Request: responses must be one of {sorted(RESPONSE_MODES)}")
        return mode

    async def _read_body(self, headers: Headers, receive: Receive) -> bytes:
        declared = headers.get(H_CONTENT_LENGTH)
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise PayloadTooLarge(f"Payload Too Large: at most {self.max_body_bytes} bytes")
        body = bytearray()
        while True:
            chunk = await receive()
            if chunk["type"] == "http.disconnect":
                raise BadRequest("Bad Request: client went away while sending")
            body += chunk.get("body", b"")
            if len(body) > self.max_body_bytes:
                raise PayloadTooLarge(f"Payload Too Large: at most {self.max_body_bytes} bytes")
            if not chunk.get("more_body", False):
                return bytes(body)

    async def _forward_one_way(self, session: Session, scope: Scope, message: ClientMessage, send: Send) -> None:
        """Notifications and the client's answers to the worker's requests: 202, no body."""
        if session.connection is None:
            # A dormant session: nothing there to notify or answer, and no reason to wake it.
            await _send_start(send, 202, [(H_SESSION_ID.encode(), session.id.encode())])
            await send({"type": "http.response.body", "body": b""})
            return
        connection = _connection(session)
        headers = upstream_headers(
            scope["headers"], host=connection.host_header, worker_session_id=session.worker_session_id
        )
        try:
            upstream = await connection.send("POST", headers, message.raw)
            await upstream.aread()
            await upstream.aclose()
        except httpx.HTTPError as exc:
            if session.connection is not connection:  # went dormant meanwhile: as if it had been
                await _send_start(send, 202, [(H_SESSION_ID.encode(), session.id.encode())])
                await send({"type": "http.response.body", "body": b""})
                return
            raise _unreachable(session, exc) from None
        status = upstream.status_code
        await _send_start(send, status, _plain_headers(upstream, session))
        await send({"type": "http.response.body", "body": b"" if status == 202 else upstream.content})

    async def _forward_request(
        self, session: Session, scope: Scope, receive: Receive, send: Send, message: ClientMessage
    ) -> None:
        connection = _connection(session)
        exchange = Exchange.begin(self.manager, session, message)
        local = await exchange.local_answer()
        if local is not None:
            await _send_json(send, local, session, status=200)
            return
        try:
            upstream = await self._send_request(session, connection, scope, message)
        except httpx.HTTPError as exc:
            exchange.failed(str(exc))
            raise _unreachable(session, exc) from None
        try:
            if message.method == "initialize" and upstream.status_code == 200:
                session.worker_session_id = upstream.headers.get(H_SESSION_ID)
            content_type = upstream.headers.get("content-type", "")
            if upstream.status_code >= 500 or upstream.status_code == 404:
                # The worker broke or lost its session: a routing failure, never the client's 404.
                detail = (await upstream.aread())[:WORKER_ERROR_EXCERPT].decode("utf-8", "replace")
                exchange.failed(f"worker answered HTTP {upstream.status_code}")
                raise WorkerUnreachable(
                    f"Worker failed: HTTP {upstream.status_code}",
                    data={"session": session.id, "worker_status": upstream.status_code, "body": detail},
                )
            if upstream.status_code == 200 and content_type.startswith(SSE):
                await self._stream_answer(session, receive, send, upstream, exchange)
            else:
                body = await upstream.aread()
                answer = await exchange.answer_json(body) if upstream.status_code == 200 else body
                await _send_start(send, upstream.status_code, _plain_headers(upstream, session))
                await send({"type": "http.response.body", "body": answer})
        except httpx.HTTPError as exc:
            raise _unreachable(session, exc) from None
        finally:
            await upstream.aclose()

    async def _send_request(
        self, session: Session, connection: WorkerConnection, scope: Scope, message: ClientMessage
    ) -> httpx.Response:
        def headers() -> list[tuple[bytes, bytes]]:
            return upstream_headers(
                scope["headers"], host=connection.host_header, worker_session_id=session.worker_session_id
            )

        try:
            return await connection.send("POST", headers(), message.raw)
        except httpx.ConnectError:
            if message.method == "initialize":
                raise
            # Refused: the worker died a moment ago and nothing was delivered, so the request can
            # go to a resumed worker instead (the exit may not have been noticed yet).
            connection = await self.manager.replace_dead_worker(session, connection)
            return await connection.send("POST", headers(), message.raw)

    async def _stream_answer(
        self, session: Session, receive: Receive, send: Send, upstream: httpx.Response, exchange: Exchange
    ) -> None:
        await _send_start(send, 200, _sse_headers(upstream, session))

        writer = _Writer(send)
        try:
            await _stream(
                receive, writer, _forward_events(upstream, writer, exchange), keepalive=self.keepalive_interval
            )
        except httpx.HTTPError as exc:
            # The worker died mid-call: the client still gets an answer for its request, not a hang.
            error = _unreachable(session, exc)
            exchange.failed(error.message)
            payload = error_body(error.code, error.message, error.data, exchange.message.id)
            await send({"type": "http.response.body", "body": encode_event(payload), "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    # -- GET ----------------------------------------------------------------------------------

    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        if not _accepts(headers, SSE):
            raise NotAcceptable(f"Not Acceptable: Accept must list {SSE}")
        session_id = headers.get(H_SESSION_ID)
        if session_id is None:
            raise BadRequest("Bad Request: Mcp-Session-Id header is required")
        session = await self.manager.lookup(session_id)
        if session.connection is None:
            await self._hold(session, receive, send)
            return
        connection = _connection(session)
        upstream_h = upstream_headers(
            scope["headers"], host=connection.host_header, worker_session_id=session.worker_session_id
        )
        try:
            upstream = await connection.send("GET", upstream_h)
        except httpx.HTTPError as exc:
            raise _unreachable(session, exc) from None
        try:
            if upstream.status_code != 200:
                body = await upstream.aread()
                await _send_start(send, upstream.status_code, _plain_headers(upstream, session))
                await send({"type": "http.response.body", "body": body})
                return
            await _send_start(send, 200, _sse_headers(upstream, session))

            writer = _Writer(send)
            # If the worker goes away, ending the stream is all a client needs to learn.
            with contextlib.suppress(httpx.HTTPError):
                await _stream(
                    receive,
                    writer,
                    _forward_events(upstream, writer, None),
                    keepalive=self.keepalive_interval,
                    stop=self.manager.stopping,
                )
            await send({"type": "http.response.body", "body": b""})
        finally:
            await upstream.aclose()

    async def _hold(self, session: Session, receive: Receive, send: Send) -> None:
        """GET for a session without a worker: keep-alives only, and no worker spawned for it.

        The stream stays held (it does not switch to the worker's) when a later POST resumes
        the session; the worker's server-to-client requests then wait for the next GET.
        """
        headers = [(b"content-type", SSE.encode()), (H_SESSION_ID.encode(), session.id.encode()), *SSE_HEADERS]
        await _send_start(send, 200, headers)

        writer = _Writer(send)
        await writer(KEEPALIVE_COMMENT)
        # Only keep-alives flow until the session ends for good or the router stops.
        await _stream(receive, writer, self.manager.wait_gone(session), keepalive=self.keepalive_interval)
        await send({"type": "http.response.body", "body": b""})

    # -- DELETE -------------------------------------------------------------------------------

    async def _delete(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = Headers(scope=scope).get(H_SESSION_ID)
        if session_id is None:
            raise BadRequest("Bad Request: Mcp-Session-Id header is required")
        session = await self.manager.lookup(session_id)
        await self.manager.end(session, State.CLOSED)
        await Response(status_code=200)(scope, receive, send)


# -- helpers ----------------------------------------------------------------------------------


def _accepts(headers: Headers, *types: str) -> bool:
    accept = headers.get("accept", "")
    offered = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    if "*/*" in offered:
        return True
    return all(t in offered or f"{t.split('/')[0]}/*" in offered for t in types)


def _connection(session: Session) -> WorkerConnection:
    if session.connection is None:
        raise WorkerUnreachable("Worker not available for this session")
    return session.connection


def _unreachable(session: Session, exc: Exception) -> WorkerUnreachable:
    return WorkerUnreachable(
        f"Worker unreachable: {type(exc).__name__}: {exc}",
        data={"session": session.id, "stderr": session.connection.worker.stderr_tail() if session.connection else ""},
    )


def _plain_headers(upstream: httpx.Response, session: Session) -> list[tuple[bytes, bytes]]:
    return downstream_headers(upstream.headers.raw, router_session_id=session.id)


def _sse_headers(upstream: httpx.Response, session: Session) -> list[tuple[bytes, bytes]]:
    headers = [h for h in _plain_headers(upstream, session) if h[0] != b"content-type"]
    return [*headers, *SSE_HEADERS]


async def _send_start(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _send_json(send: Send, body: bytes, session: Session, *, status: int) -> None:
    headers = [(b"content-type", JSON.encode()), (H_SESSION_ID.encode(), session.id.encode())]
    await _send_start(send, status, headers)
    await send({"type": "http.response.body", "body": body})


class _Writer:
    """Writes body chunks and remembers when, so keep-alives go out only after silence."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.last = time.monotonic()

    async def __call__(self, data: bytes) -> None:
        self.last = time.monotonic()
        await self.send({"type": "http.response.body", "body": data, "more_body": True})


async def _forward_events(upstream: httpx.Response, writer: _Writer, exchange: Exchange | None) -> None:
    """The worker's SSE stream, cut at event boundaries (so keep-alives never land mid-event),
    each chunk's whole events in one write; a request's own answer passes through its exchange."""
    splitter = EventSplitter()
    async for chunk in upstream.aiter_raw():
        events = splitter.feed(chunk)
        if events:
            if exchange is not None:
                events = [await exchange.answer_event(e) for e in events]
            await writer(b"".join(events))


async def _stream(
    receive: Receive, writer: _Writer, work: Awaitable[None], *, keepalive: float, stop: anyio.Event | None = None
) -> None:
    """Runs ``work`` (which writes whole events) until it ends, the client goes or ``stop`` is
    set (a stream that never ends would hold up graceful shutdown). Meanwhile the task that
    watches for the client's disconnect also writes a keep-alive comment after ``keepalive``
    seconds of silence: load balancers cut idle streams after 60–125 s. The caller closes the
    upstream afterwards."""
    failure: list[Exception] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while True:
                silence = time.monotonic() - writer.last
                if silence >= keepalive:
                    await writer(KEEPALIVE_COMMENT)
                    continue
                with anyio.move_on_after(keepalive - silence):
                    if (await receive())["type"] == "http.disconnect":
                        tg.cancel_scope.cancel()
                        return

        async def until_stop(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        if stop is not None:
            tg.start_soon(until_stop, stop)
        try:
            await work
        except Exception as exc:  # re-raised outside the task group, so callers see it unwrapped
            failure.append(exc)
        tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
