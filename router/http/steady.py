"""The steady lane: a tool call on a session whose worker is up, served in the server's callbacks.

Nearly every request a conversation makes is a tool call on a session whose worker is up and
needs nothing first, and nearly every answer is one plain SSE event that arrives whole. Served
through the /mcp chain, such a call is a task that passes four ASGI layers each way, awaits the
answer's head and then its body, and reads the answer before it leaves; its Python ran on the
call's critical path twice, cold after every pause (`scripts/bench`: the router's extra time per
call, against a relay in Python that does none of it).

Here the request goes to the worker from the parser's last callback (on an idle kept-alive
connection to it), and its answer to the client from the worker connection's last callback,
recorded and in the write-ahead file first; what the answer's text tells the router is read once
it has left (``Exchange.after_answer``). The checks are the chain's own (``request_refusal``,
``header_credentials``, the media rules, ``SessionRequests.steady``): a request any of them would refuse or
treat otherwise is the chain's. An answer that is anything but one plain event of the call's own
answer, not whole after the endpoint's ``WHOLE_ANSWER_WAIT``, an exchange that broke, or a write-ahead that must
wait, is handed over to a task that serves it on as the chain would (``McpEndpoint.continue_steady``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send

from router.http import endpoint as mcp_endpoint
from router.http.auth import TokenAuth, header_credentials
from router.http.direct import DirectRequest
from router.http.dispatch import INTERNAL_ERROR_HEADERS, serve_guarded
from router.http.endpoint import FirstSend, McpEndpoint
from router.http.errors import INTERNAL_ERROR, RouterError, error_body
from router.http.exchange import Exchange
from router.http.media import accepts, media_type
from router.http.messages import Kind, parse
from router.http.proxy import sse_answer_headers, upstream_headers
from router.http.security import OriginPolicy, request_refusal
from router.http.sse import encode_event, lone_event_data
from router.http.streaming import leaving, send_start
from router.http.timing import RequestTiming
from router.http.upstream import UpstreamResponse
from router.operator.metrics import Metrics
from router.sessions.page_crash import answer_met_crash
from router.types import H_PROTOCOL_VERSION, H_SESSION_ID, HANDSHAKE_VERSIONS, JSON, MCP_ENDPOINT, SSE

__all__ = ["SteadyLane"]

log = logging.getLogger("mcp_router.server")

LANE_FAILED: Final = "internal error on the router's steady lane"
# What the lane reads of a request's header fields (uvicorn gives their names lower-cased).
READ_FIELDS: Final = tuple(
    (name, name.encode("latin-1")) for name in ("content-type", "accept", H_SESSION_ID, H_PROTOCOL_VERSION)
)

# Starts a request's ASGI app as the connection's task, with the request's headers as the app
# sees them (the server protocol's: it tracks the task).
Run = Callable[[ASGIApp, list[tuple[bytes, bytes]]], None]


class SteadyLane:
    """What the direct lane's requests try first (``router/http/server.py``); ``served`` counts
    the calls answered here, ``handed_over`` those it sent and the chain served on."""

    def __init__(
        self, endpoint: McpEndpoint, *, policy: OriginPolicy, auth: TokenAuth | None, metrics: Metrics | None
    ) -> None:
        self.endpoint = endpoint
        self.policy = policy
        self.auth = auth
        self.metrics = metrics
        self.served = 0
        self.handed_over = 0

    def take(self, request: DirectRequest, headers: list[tuple[bytes, bytes]], body: bytes, run: Run) -> bool:
        """Sends ``request`` to its worker and answers it when the answer comes; False (nothing
        done) when the chain must serve it."""
        started = time.perf_counter()
        if request_refusal(self.policy, headers) is not None:
            return False
        auth = self.auth
        if auth is not None:  # credentials never go past the router, shown or not
            verdicts, headers = header_credentials(headers, auth, path=MCP_ENDPOINT)
            if not any(verdicts) and MCP_ENDPOINT not in auth.open_paths:
                return False
        timing = RequestTiming()
        exchange = self._exchange(_read_fields(headers), body, timing)
        if exchange is None:
            return False
        call = SteadyCall(self, request, exchange, partial(_run_with, run, headers), started)
        return call.send(headers)

    def _exchange(self, headers: Mapping[str, str], body: bytes, timing: RequestTiming) -> Exchange | None:
        """The exchange of a POST this lane may serve: a tool call, in every way one that the
        endpoint's ``_post`` would send on to the session's worker at once, on a session whose
        worker is up and needs nothing first (``SessionRequests.steady``). None for any other
        request, which the chain serves (and answers any error of)."""
        endpoint = self.endpoint
        if media_type(headers) != JSON or not accepts(headers, JSON, SSE) or len(body) > endpoint.max_body_bytes:
            return None
        session_id = headers.get(H_SESSION_ID)
        version = headers.get(H_PROTOCOL_VERSION)
        if session_id is None or (version is not None and version not in HANDSHAKE_VERSIONS):
            return None
        session = endpoint.manager.sessions.get(session_id)
        if session is None or not endpoint.manager.requests.steady(session):
            return None
        try:
            message = parse(body)
        except RouterError:
            return None
        if message.kind is not Kind.REQUEST or message.method != "tools/call" or message.id in session.requests:
            return None
        exchange = Exchange(endpoint.hooks, session, message, timing)
        return exchange if exchange.needs_worker() else None


class SteadyCall:
    """One call on the steady lane, from its request sent to its answer written."""

    __slots__ = (
        "connection", "exchange", "lane", "leave", "release", "request", "response", "run", "sent_to", "started",
        "timer", "url_before",
    )

    def __init__(
        self, lane: SteadyLane, request: DirectRequest, exchange: Exchange, run: Callable[[ASGIApp], None],
        started: float,
    ) -> None:
        self.lane = lane
        self.request = request
        self.exchange = exchange
        self.run = run
        self.started = started
        self.url_before = exchange.session.current_url
        self.sent_to = exchange.session.worker_session_id
        self.connection = exchange.session.connection
        self.response: UpstreamResponse | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.leave: Callable[[], None] = _nothing
        self.release: Callable[[], None] = _nothing  # the stand-in for a task, once sent (DirectRequest.hold)

    def send(self, client_headers: list[tuple[bytes, bytes]]) -> bool:
        exchange = self.exchange
        session = exchange.session
        connection = self.connection
        assert connection is not None  # SessionRequests.steady
        in_flight = session.client_request(exchange.message.id)
        in_flight.__enter__()
        try:
            headers = upstream_headers(client_headers, host=connection.host_header, worker_session_id=self.sent_to)
            response = connection.upstream.send_now("POST", headers, exchange.message.raw)
        except Exception:  # nothing was sent: the chain serves it (and meets the problem itself)
            log.exception("steady lane: a call not sent session=%s", session.id)
            response = None
        if response is None:  # no idle connection to the worker: the chain connects one
            in_flight.__exit__(None, None, None)
            return False
        self.leave = partial(_leave, in_flight)
        self.release = self.request.hold(self._cut)
        self.response = response
        exchange.record_request()
        response.on_done = self._answered
        self.timer = asyncio.get_running_loop().call_later(mcp_endpoint.WHOLE_ANSWER_WAIT, self._slow)
        self.lane.served += 1
        return True

    # -- the worker's side -------------------------------------------------------------------

    def _answered(self) -> None:
        """The worker's answer is whole, or the exchange broke, or the answer is past what is held
        unread."""
        try:
            self._answer()
        except Exception:
            self._broke()

    def _answer(self) -> None:
        assert self.timer is not None and self.response is not None
        self.timer.cancel()
        response = self.response
        if response.status_code != 200 or not response.complete or not response.content_type.startswith(SSE):
            self._hand_over(mcp_endpoint.WHOLE_ANSWER_WAIT)
            return
        data = response.peek()
        payload = lone_event_data(data)
        page, connection = self.exchange.session.current_url, self.connection
        if payload is not None and connection and answer_met_crash(payload, page, connection.worker.output_dir):
            self._hand_over(mcp_endpoint.WHOLE_ANSWER_WAIT)  # the chain sends it once more (page_crash.py)
            return
        taken = self.exchange.take_answer(payload) if payload is not None else None
        if taken is None:  # not one plain event of this call's answer
            self._hand_over(mcp_endpoint.WHOLE_ANSWER_WAIT)
            return
        response.read_now()
        body = data if taken is payload else encode_event(taken)
        headers = sse_answer_headers(response.headers, self.exchange.session.id)
        if not self.exchange.durable_now():
            self.lane.handed_over += 1
            self._run_guarded(partial(self._answer_when_durable, headers, body))
            return
        self.request.answer_whole(200, headers, body)
        # As a task, which starts after the turn's writes have left (coalesce.py flushes them
        # first), and in which what the session's upkeep starts has the task group it needs.
        self._run_guarded(self._after_answer)

    def _slow(self) -> None:
        """Not whole after WHOLE_ANSWER_WAIT: the chain relays it as a stream."""
        try:
            self._hand_over(0.0)
        except Exception:
            self._broke()

    def _hand_over(self, settle: float) -> None:
        assert self.response is not None and self.connection is not None
        self._stop_listening()
        self.lane.handed_over += 1
        first = FirstSend(
            self.exchange, self.connection, self.response, self.sent_to, self.url_before, settle, self.leave
        )
        self._run_guarded(partial(self._serve_on, first))

    def _stop_listening(self) -> None:
        if self.response is not None:
            self.response.on_done = None
        if self.timer is not None:
            self.timer.cancel()

    def _broke(self) -> None:
        """A failure in the lane's own callbacks (a bug): logged, and the call ends as the chain
        ends one that raised: a JSON-RPC 500 if nothing was written, in the record as failed, its
        id no longer in flight."""
        log.exception("steady lane: a call failed session=%s", self.exchange.session.id)
        self._stop_listening()
        self._to_task(self._fail)

    def _run_guarded(self, app: ASGIApp) -> None:
        """``app`` as the connection's task, behind the chain's last resort (``serve_guarded``)."""
        self._to_task(partial(serve_guarded, app))

    def _to_task(self, app: ASGIApp) -> None:
        self.run(app)
        self.release()  # the task stands for the call now

    def _cut(self) -> None:
        """The server's graceful timeout passed with the call still in callbacks (its worker
        answered nothing usable in all that time): cut as the chain's cancelled task is."""
        self._stop_listening()
        if self.response is not None:
            self.response.close()
        self.leave()
        self.request.abort()

    # -- after the answer --------------------------------------------------------------------

    async def _serve_on(self, first: FirstSend, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.lane.endpoint.continue_steady(first, scope, receive, send)
        finally:
            self._observe()

    async def _after_answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._finish()

    async def _fail(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if self.response is not None:
                await self.response.aclose()  # an answer not read whole spoils its connection
            await self.exchange.failed(LANE_FAILED)
            if not self.request.response_started:
                body = error_body(INTERNAL_ERROR, "Internal error", None, self.exchange.message.id)
                headers = [*INTERNAL_ERROR_HEADERS, (b"content-length", b"%d" % len(body))]
                await send_start(send, 500, headers)
                await send({"type": "http.response.body", "body": body})
        finally:
            self._finish()

    async def _answer_when_durable(
        self, headers: list[tuple[bytes, bytes]], body: bytes, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """An answer whose row the write-ahead file could not take at once: it waits for it."""
        try:
            await self.exchange.write_ahead()
            send = leaving(send)
            await send_start(send, 200, headers)
            await send({"type": "http.response.body", "body": body})
        finally:
            self._finish()

    def _finish(self) -> None:
        exchange = self.exchange
        try:
            try:
                exchange.after_answer()
            finally:
                self.lane.endpoint.manager.requests.served(exchange.session, exchange.message, self.url_before)
        finally:
            self.leave()
            exchange.finish()
            self._observe()

    def _observe(self) -> None:
        """The router's share of the call, as ``TimedEndpoint`` observes the chain's."""
        metrics, timing = self.lane.metrics, self.exchange.timing
        added = timing.router_share(time.perf_counter() - self.started) if timing is not None else None
        if metrics is not None and added is not None:
            metrics.router_seconds.observe(added)


def _read_fields(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The header fields the lane reads, the first of each as ``Headers.get`` gives it (one pass
    in C, not a scan of the list per field)."""
    first = dict(reversed(raw))
    return {name: first[key].decode("latin-1") for name, key in READ_FIELDS if key in first}


def _nothing(*_: Any) -> None:
    pass


def _leave(in_flight: AbstractContextManager[None]) -> None:
    in_flight.__exit__(None, None, None)


def _run_with(run: Run, headers: list[tuple[bytes, bytes]], app: ASGIApp) -> None:
    run(app, headers)
