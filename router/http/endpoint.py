"""POST/GET/DELETE on /mcp: the protocol's rules and status codes, and the streams both ways.

The client's GET stream belongs to the session, not to a worker: it stays open with keep-alives
while the session has no worker, and relays each new worker's stream (its pings, ``roots/list``)
as soon as that worker is attached, across reaps, crashes, hibernation and router restarts.
"""

from __future__ import annotations

import json
import logging
from typing import Final
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from router.errors import (
    BadRequest,
    InvalidParams,
    MethodNotAllowed,
    NotAcceptable,
    PayloadTooLarge,
    RouterError,
    SessionNotFound,
    UnsupportedMediaType,
    UnsupportedVersion,
    WorkerUnreachable,
    error_body,
)
from router.http.auth import OPEN_SCOPE, SCOPE_KEY
from router.http.exchange import Exchange, ExchangeHooks, RequestCancelled
from router.http.media import accepts, media_type
from router.http.one_way import SESSION_LOST, forward_one_way
from router.http.session_stream import SessionStream
from router.http.streaming import (
    Writer,
    answer_missing,
    forward_events,
    run_stream,
    send_json,
    send_start,
    whole_answer,
)
from router.http.timing import request_timing
from router.http.worker_faults import crashed_page_under, unreachable, worker_died
from router.protocol.messages import ClientMessage, Kind, initialize_problem, parse
from router.protocol.sse import encode_event
from router.sessions.conversations import conversation_id
from router.sessions.manager import SessionManager
from router.sessions.table import ENDED, Session, State
from router.types import (
    H_CONTENT_LENGTH,
    H_CONVERSATION,
    H_PROTOCOL_VERSION,
    H_SESSION_ID,
    HANDSHAKE_VERSIONS,
    JSON,
    SSE,
)
from router.upstream.client import UpstreamError, UpstreamResponse
from router.upstream.connection import WorkerConnection, answer_headers, sse_answer_headers, upstream_headers

log = logging.getLogger("mcp_router.server")

ALLOWED_METHODS: Final = "GET, POST, DELETE"
RESPONSE_MODES: Final = frozenset({"full", "compact"})
WORKER_ERROR_EXCERPT: Final = 500
# A worker sends an answer's head at once and its event when the tool is done. A quick tool's
# answer is awaited whole (one write, no task group, no keep-alive timer, no disconnect watch);
# a slower one is relayed as a stream after this long. Nothing can be lost by waiting: the body
# is relayed the moment its first byte arrives, whole or not.
WHOLE_ANSWER_WAIT: Final = 1.0


class McpEndpoint:
    def __init__(
        self,
        manager: SessionManager,
        hooks: ExchangeHooks,
        *,
        max_body_bytes: int,
        keepalive_interval: float,
        response_mode: str,
    ) -> None:
        self.manager = manager
        self.hooks = hooks
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
            await exc.response()(scope, receive, send)

    # -- POST ---------------------------------------------------------------------------------

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        if media_type(headers) != JSON:
            raise UnsupportedMediaType(f"Unsupported Media Type: Content-Type must be {JSON}")
        if not accepts(headers, JSON, SSE):
            raise NotAcceptable(f"Not Acceptable: Accept must list {JSON} and {SSE}")
        message = parse(await self._read_body(headers, receive))
        try:
            session_id = headers.get(H_SESSION_ID)
            if session_id is None:
                await self._initialize(scope, message, send)
                return
            session = await self._session_for(headers, message, session_id)
            if message.kind is not Kind.REQUEST:
                await forward_one_way(session, scope, message, send)
                return
            with session.client_request(message.id):  # 400 for an id in flight already
                exchange = Exchange(self.hooks, session, message, request_timing(scope))
                try:
                    await self._answer(session, scope, receive, send, exchange)
                finally:
                    exchange.finish()
        except RouterError as exc:
            exc.request_id = message.id
            raise
        except Exception as exc:
            # A bug: logged, and the client still gets an answer it can read (a JSON-RPC error
            # with its request's id), not Starlette's plain-text 500.
            log.exception("internal error serving %s session=%s", message.method, headers.get(H_SESSION_ID))
            raise RouterError("Internal error", request_id=message.id) from exc

    async def _answer(self, session: Session, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        if not exchange.needs_worker():
            answer = await exchange.local_answer()
            assert answer is not None
            await send_json(send, answer, session, status=200)
            return
        if session.connection is None:
            exchange.record_request()  # in the record while it waits for a worker, not after
        # Gives the session a worker first (spawn or resume: replayed handshake, restored browser).
        async with self.manager.requests.serving(session, exchange.message) as started_worker:
            if exchange.timing is not None and started_worker:
                exchange.timing.started_worker = True
            await self._forward_request(session, scope, receive, send, exchange)

    async def _initialize(self, scope: Scope, message: ClientMessage, send: Send) -> None:
        if message.method != "initialize":
            # Also what a 2026-07-28 client's server/discover probe gets, so it falls back.
            raise BadRequest("Bad Request: Mcp-Session-Id header is required; send initialize first")
        problem = initialize_problem(message.params)
        if problem is not None:
            raise InvalidParams(f"Invalid params: {problem}")
        key = Headers(scope=scope).get(H_CONVERSATION)
        conversation = None if key is None else conversation_id(scope.get("state", {}).get(SCOPE_KEY, OPEN_SCOPE), key)
        session, result = await self.manager.open(
            message, response_mode=self._response_mode(scope), conversation=conversation
        )
        exchange = Exchange(self.hooks, session, message, request_timing(scope))
        body = json.dumps({"jsonrpc": "2.0", "id": message.id, "result": result}).encode()
        try:
            await send_json(send, await exchange.answer_json(body), session, status=200)
        finally:
            exchange.finish()

    async def _session_for(self, headers: Headers, message: ClientMessage, session_id: str) -> Session:
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

    async def _forward_request(
        self, session: Session, scope: Scope, receive: Receive, send: Send, exchange: Exchange
    ) -> None:
        connection = _connection(session)
        local = await exchange.local_answer()  # e.g. create_new_session
        if local is not None:
            await send_json(send, local, session, status=200)
            return
        try:
            upstream = await self._send_request(session, connection, scope, exchange)
        except RequestCancelled:
            await send_json(send, await exchange.cancelled(), session, status=200)
            return
        except UpstreamError as exc:
            await exchange.failed(str(exc))
            raise unreachable(session, exc) from None
        try:
            status = upstream.status_code
            if status >= 500 or status == SESSION_LOST:
                # The worker broke or lost its session: a routing failure, never the client's 404.
                detail = _excerpt(await upstream.aread())
                await exchange.failed(f"worker answered HTTP {status}")
                raise WorkerUnreachable(
                    f"Worker failed: HTTP {status}",
                    data={"session": session.id, "worker_status": status, "body": detail},
                )
            if status == 200 and upstream.content_type.startswith(SSE):
                await self._stream_answer(session, receive, send, upstream, exchange)
            else:
                body = await upstream.aread()
                answer = await exchange.answer_json(body) if status == 200 else body
                if not exchange.done:  # the worker's refusal (a 4xx), passed on as it is
                    await exchange.failed(f"worker answered HTTP {status}: {_excerpt(body)}")
                await send_start(send, status, answer_headers(upstream.headers, session.id))
                await send({"type": "http.response.body", "body": answer})
        except UpstreamError as exc:
            await exchange.failed(str(exc))  # its head came, its body broke off (or never came)
            raise unreachable(session, exc) from None
        finally:
            await upstream.aclose()

    async def _send_request(
        self, session: Session, connection: WorkerConnection, scope: Scope, exchange: Exchange
    ) -> UpstreamResponse:
        message = exchange.message

        sent_to: str | None = None  # the worker session it went to last: a 404 is about that one

        async def send_to(worker: WorkerConnection) -> UpstreamResponse:
            nonlocal sent_to
            # Checked at each send: the request may have waited (a resume, the relay, a retry's
            # resume) while the client cancelled it; what is not sent is not run.
            if session.requests.cancelled(message.id):
                raise RequestCancelled
            sent_to = session.worker_session_id
            headers = upstream_headers(scope["headers"], host=worker.host_header, worker_session_id=sent_to)
            exchange.confine_again(worker)  # a shared worker's folder for its file names, if another
            return await worker.send("POST", headers, exchange.message.raw, sent=exchange.record_request)

        async def send_or_resume(worker: WorkerConnection) -> UpstreamResponse:
            try:
                return await send_to(worker)
            except UpstreamError as exc:
                # A worker that died a moment ago answered nothing (it may have started the call),
                # so the request goes to a resumed worker instead, as the call's one retry (the
                # exit may not have been noticed yet); one that lives on broke mid-request: 502.
                if not await worker_died(worker, exc):
                    raise
                return await send_to(await self.manager.requests.replace_dead_worker(session, worker))

        upstream = await send_or_resume(connection)
        if upstream.status_code != SESSION_LOST:
            crashed = None
            if message.tool_name is not None:
                crashed = await crashed_page_under(session, upstream, exchange, WHOLE_ANSWER_WAIT)
            if crashed is not None:
                return await send_to(await self.manager.requests.replace_lost_page(session, crashed))
            return upstream
        # The worker ended our MCP session (a ping that went unanswered while the client's stream
        # was away) but lives on, browser and all: nothing was done, so a new session may redo it.
        await upstream.aclose()
        reopened = await self.manager.requests.reopen_worker_session(session, connection, lost=sent_to)
        if not reopened and session.connection is connection:
            raise WorkerUnreachable("Worker lost the session and refused a new one", data={"session": session.id})
        if session.connection is None:
            # The session left that worker meanwhile (its browser died, its exit was noticed): the
            # request goes to a resumed one.
            return await send_to(await self.manager.requests.replace_dead_worker(session, connection))
        return await send_or_resume(session.connection)  # the reopened session, or a new worker's

    async def _stream_answer(
        self, session: Session, receive: Receive, send: Send, upstream: UpstreamResponse, exchange: Exchange
    ) -> None:
        await upstream.settle(WHOLE_ANSWER_WAIT)
        headers = sse_answer_headers(upstream.headers, session.id)
        if upstream.complete:
            # The usual case: the worker wrote its answer and the stream's end at once, so there
            # is no silence to fill and no client to watch: no task group, one body.
            body = await whole_answer(upstream.read_now(), exchange)
            await send_start(send, 200, headers)
            await send({"type": "http.response.body", "body": body})
            return
        await send_start(send, 200, headers)
        writer = Writer(send)
        relayed = False

        async def relay() -> None:
            nonlocal relayed
            await forward_events(upstream.aiter_raw(), writer, exchange)
            relayed = True  # to the stream's end (not cut short by the client going)

        try:
            await run_stream(receive, writer, relay(), keepalive=self.keepalive_interval)
        except UpstreamError as exc:
            # The worker died mid-call: the client still gets an answer for its request, not a hang.
            error = unreachable(session, exc)
            await exchange.failed(error.message)
            payload = error_body(error.code, error.message, error.data, exchange.message.id)
            await send({"type": "http.response.body", "body": encode_event(payload), "more_body": True})
        if relayed and (missing := await answer_missing(exchange)):
            await send({"type": "http.response.body", "body": missing, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    # -- GET ----------------------------------------------------------------------------------

    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        if not accepts(headers, SSE):
            raise NotAcceptable(f"Not Acceptable: Accept must list {SSE}")
        session_id = headers.get(H_SESSION_ID)
        if session_id is None:
            raise BadRequest("Bad Request: Mcp-Session-Id header is required")
        session = await self.manager.lookup(session_id)
        stream = SessionStream(keepalive_interval=self.keepalive_interval, stopping=self.manager.stopping)
        await stream.serve(session, scope, receive, send)

    # -- DELETE -------------------------------------------------------------------------------

    async def _delete(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = Headers(scope=scope).get(H_SESSION_ID)
        if session_id is None:
            raise BadRequest("Bad Request: Mcp-Session-Id header is required")
        session = await self.manager.lookup(session_id)
        await self.manager.end(session, State.CLOSED)
        await Response(status_code=200)(scope, receive, send)


# -- helpers ----------------------------------------------------------------------------------


def _connection(session: Session) -> WorkerConnection:
    if session.connection is None:
        if session.state in ENDED:  # DELETEd (or ended by the operator) while this request waited
            raise SessionNotFound("Session not found: initialize a new session")
        raise WorkerUnreachable("Worker not available for this session")
    return session.connection


def _excerpt(body: bytes) -> str:
    return body[:WORKER_ERROR_EXCERPT].decode("utf-8", "replace")
