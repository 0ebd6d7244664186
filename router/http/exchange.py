"""One client request's life: its ref_id, its record, and what the router does to its answer."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from router.catalog.paging import CatalogError
from router.errors import WorkerUnreachable, error_body
from router.http.file_arguments import FileRefused, confined_call, names_files, workspace_of
from router.http.timing import RequestTiming
from router.http.tool_policy import ToolPolicy
from router.protocol.messages import ClientMessage
from router.protocol.sse import encode_event, event_data, event_id
from router.record import tools
from router.record.ref_ids import RefIds
from router.record.snapshots import Extracted
from router.record.worker_answer import WorkerAnswer, answer_of, encode, read_answer, reframed

if TYPE_CHECKING:
    from router.catalog.answers import Catalog
    from router.operator.metrics import Metrics
    from router.record.recorder import Recorder
    from router.sessions.browser_watch import BrowserWatches
    from router.sessions.table import Session
    from router.upstream.connection import WorkerConnection
    from workers.supervisor import Worker

log = logging.getLogger("mcp_router.calls")

INVALID_PARAMS: Final = -32602
# LSP's "RequestCancelled", as the MCP SDKs' clients know it; a client ignores any answer to a
# request it cancelled, but its HTTP request must still end.
REQUEST_CANCELLED: Final = -32800
CANCELLED_MESSAGE: Final = "Request cancelled"
CANCELLED_BEFORE_SENT: Final = "cancelled by the client before it reached the worker"


class RequestCancelled(Exception):
    """The client cancelled the request before it was sent to a worker: it is not sent."""


@dataclass(frozen=True)
class ExchangeHooks:
    """What an exchange may use, handed over explicitly once by the app."""

    recorder: Recorder | None
    metrics: Metrics | None
    tool_policy: ToolPolicy
    # Answers the router gives itself while a session has no worker (ping, cached tools/list).
    cached_answer: Callable[[Session, ClientMessage], dict[str, Any] | None]
    renew_browser: Callable[[Session], Awaitable[str]]
    # Notes what a tool result tells of the session's browser (page URL, refs' frame) and gives
    # the result the client gets: with a pending resume notice (router/sessions/resume_notice.py).
    on_tool_answer: Callable[[Session, dict[str, Any], Extracted], dict[str, Any]]
    # resources/* and prompts/*, answered from the record and the prompt files (router/catalog/).
    catalog: Catalog | None = None
    # Told of each tool call done, so a browser that dies under its worker is noticed.
    browsers: BrowserWatches | None = None
    ref_ids: RefIds = field(default_factory=RefIds)
    # Whether a worker is shared by several sessions: then a call's file names are kept to its
    # session's own folder (router/http/file_arguments.py). None when no worker is ever shared.
    shares_worker: Callable[[Worker], bool] | None = None


@dataclass(eq=False, slots=True)
class Exchange:
    hooks: ExchangeHooks
    session: Session
    message: ClientMessage
    timing: RequestTiming | None = None
    ref_id: str = ""  # given by the hooks' RefIds unless set
    started: float = field(default_factory=time.perf_counter)
    done: bool = False
    # (status, ms) once answered or failed; counted and logged by finish(), after the answer.
    outcome: tuple[str, float] | None = None
    request_recorded: bool = False
    files_checked: bool = False  # the call's file names, against the worker it is sent to
    # The shared worker they were kept to, and the call as the client sent it (for another one).
    _confined_for: Worker | None = field(default=None, init=False)
    _as_sent: ClientMessage | None = field(default=None, init=False)
    # An answer read before it was taken (``read``): its bytes and what they parsed to.
    _read: tuple[bytes, WorkerAnswer | None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not self.ref_id:
            self.ref_id = self.hooks.ref_ids.next()

    def record_request(self) -> None:
        """The request's row, once: called as the request leaves for the worker (so enqueueing
        it is done while the worker works, not before the request goes), and by the answer or the
        failure at the latest. A call whose file names its worker may yet change waits for them
        (``_confine_files``): the record shows what the worker was sent."""
        message, unchecked = self.message, self.hooks.shares_worker is not None and not self.files_checked
        if not (unchecked and names_files(message.tool_name, message.params.get("arguments"))):
            self._write_request()

    def _write_request(self) -> None:
        if self.request_recorded:
            return
        self.request_recorded = True
        recorder = self.hooks.recorder
        if recorder is not None:
            message = self.message
            recorder.request(
                self.ref_id, self.session.id, message.method or "", message.tool_name, message.body.get("params"),
                size=len(message.raw),
            )

    @property
    def is_tool_call(self) -> bool:
        return self.message.method == "tools/call"

    def needs_worker(self) -> bool:
        """False when the router answers this request itself (no worker is started for it)."""
        return not (
            self.message.tool_name in tools.NAMES
            or (self.is_tool_call and not self.hooks.tool_policy.allows(self.message.tool_name))
            or self.hooks.cached_answer(self.session, self.message) is not None
            or (self.hooks.catalog is not None and self.hooks.catalog.handles(self.message.method))
        )

    async def local_answer(self) -> bytes | None:
        """The router's own answer (a router tool, a refused tool, a cached handshake answer);
        None to forward the request to the worker."""
        message = self.message
        name = message.tool_name
        response: dict[str, Any]
        if (refusal := self._refusal()) is not None:
            response = {"jsonrpc": "2.0", "id": message.id, "error": {"code": INVALID_PARAMS, "message": refusal}}
        elif name in tools.NAMES:
            arguments = message.params.get("arguments")
            recorder = self.hooks.recorder
            result = await tools.call(
                name or "",
                arguments if isinstance(arguments, dict) else {},
                records=recorder.records if recorder is not None else None,
                session_id=self.session.id,
                renew=lambda: self.hooks.renew_browser(self.session),
            )
            response = {"jsonrpc": "2.0", "id": message.id, "result": result}
        elif self.hooks.catalog is not None and self.hooks.catalog.handles(message.method):
            try:
                response = {"jsonrpc": "2.0", "id": message.id,
                            "result": await self.hooks.catalog.answer(self.session, message)}
            except CatalogError as exc:
                response = {"jsonrpc": "2.0", "id": message.id, "error": exc.error()}
            await self._complete(self.hooks.catalog.recordable(response))
            return json.dumps(response).encode()
        else:
            cached = self.hooks.cached_answer(self.session, message)
            if cached is None:
                return None
            response = {"jsonrpc": "2.0", "id": message.id, "result": cached}
            await self._complete(response)
            return self._rewritten(response) or json.dumps(response).encode()
        await self._complete(response)
        return json.dumps(response).encode()

    def _refusal(self) -> str | None:
        """Why this call is not sent: a hidden tool, or a file name past its session's own folder."""
        if not self.is_tool_call:
            return None
        policy, name = self.hooks.tool_policy, self.message.tool_name
        return self._confine_files() if policy.allows(name) else policy.refusal(name)

    def _confine_files(self) -> str | None:
        """On a shared worker, the call's file names kept to its session's own folder of that
        worker's output dir: the message rewritten (what is sent and recorded), or why it is
        refused. Done once the session has the worker the call goes to."""
        connection, shares = self.session.connection, self.hooks.shares_worker
        if shares is None or connection is None or self.files_checked:
            return None
        self.files_checked = True
        if not shares(connection.worker):
            return None
        try:
            self._as_sent, self._confined_for = self.message, connection.worker
            self.message = confined_call(
                self.message, output_dir=connection.worker.output_dir, session_id=self.session.id,
                workspace=workspace_of(self.session.roots.known),
            )  # fmt: skip
        except FileRefused as exc:
            return str(exc)
        return None

    def confine_again(self, connection: WorkerConnection) -> None:
        """The call sent once more, to another shared worker (its first one died under it): its
        file names kept to the session's folder there instead. WorkerUnreachable if refused."""
        if self._as_sent is None or self._confined_for is connection.worker:
            return
        try:
            self.message = confined_call(
                self._as_sent, output_dir=connection.worker.output_dir, session_id=self.session.id,
                workspace=workspace_of(self.session.roots.known),
            )  # fmt: skip
        except FileRefused as exc:
            raise WorkerUnreachable(f"The call could not be sent again: {exc}") from None
        self._confined_for = connection.worker

    async def answer_event(self, event: bytes) -> bytes:
        """One SSE event of the worker's answer stream; the one holding our response is taken."""
        if self.done:
            return event
        data = event_data(event)
        if not data:
            return event
        answer = await self.answer_json(data)
        return event if answer is data else encode_event(answer, event_id(event))

    async def answer_json(self, body: bytes) -> bytes:
        """What the client gets for ``body``: itself when it is not this request's answer or is
        passed on untouched, else the answer as ``take`` gives it (recorded first)."""
        answer = self.take(body)
        if answer is None:
            return body
        await self.wait_committed()
        return answer

    async def failed(self, error: str) -> None:
        """The request got no answer from its worker; the client gets ``error`` instead, and
        (a tool call) only once that is in the record, as an answer would be."""
        if self.done:
            return
        self.done = True
        self._write_request()
        recorder = self.hooks.recorder
        if recorder is not None:
            recorder.response(self.ref_id, status="error", result=None, error=error, duration_ms=self._elapsed_ms())
            if self.is_tool_call and not await recorder.committed():
                log.warning("call failed without its record session=%s ref=%s", self.session.id, self.ref_id)
        self._end("error")

    async def cancelled(self) -> bytes:
        """The answer to a request the client cancelled before it reached a worker, recorded."""
        await self.failed(CANCELLED_BEFORE_SENT)
        return error_body(REQUEST_CANCELLED, CANCELLED_MESSAGE, None, self.message.id)

    def read(self, payload: bytes) -> WorkerAnswer | None:
        """``payload`` parsed, when it is the answer to this request. Kept until it is taken, so an
        answer looked at first (``worker_faults.crashed_page_under``) is parsed once."""
        kept = self._read
        if kept is not None and kept[0] == payload:
            return kept[1]
        answer = read_answer(payload, self.message.id, tool_call=self.is_tool_call)
        self._read = (payload, answer)
        return answer

    def take(self, payload: bytes) -> bytes | None:
        """When ``payload`` is the answer to this request: records it, hands its summary to the
        catalog and the session, and returns what the client gets (``payload`` itself when
        untouched); else None, and nothing is done (the commit it must wait for is the
        caller's)."""
        answer = self.read(payload)
        self._read = None
        if answer is None:
            return None
        if answer.facts is not None:
            return self._take_tool_result(answer)
        self._record(answer)
        return self._rewritten(answer.message) or payload

    def _take_tool_result(self, answer: WorkerAnswer) -> bytes:
        """A tool's result: the call's refId set on it, recorded as the client gets it, then told
        to the catalog and the session (which may add a resume notice), compacted if asked for."""
        result = tools.with_ref_meta(answer.result, self.ref_id)
        result_json = encode(result)
        facts = self._keep("error" if answer.is_error else "success", result_json, None, answer.facts, parsed=result)
        assert facts is not None  # a tool result's summary, with its linked snapshot if read
        if (catalog := self.hooks.catalog) is not None:
            catalog.after_tool_answer(self.session, self.message.tool_name, facts)
        shown = self.hooks.on_tool_answer(self.session, result, facts)
        if self.session.response_mode == "compact":
            shown = tools.compact(shown, facts, ref_id=self.ref_id, tool=self.message.tool_name)
        return reframed(answer.message, "result", result_json if shown is result else encode(shown))

    def _rewritten(self, response: dict[str, Any]) -> bytes | None:
        """Another method's answer as the client gets it, or None for the worker's bytes untouched:
        initialize's capabilities with the catalog's, tools/list as the tool policy has it."""
        if "result" not in response:
            return None
        method = self.message.method
        if method == "initialize" and (catalog := self.hooks.catalog) is not None:
            response = {**response, "result": catalog.with_capabilities(response["result"])}
        elif method == "tools/list":
            listed = tools.with_router_tools(self.hooks.tool_policy.filter_list(response["result"]))
            response = {**response, "result": listed}
        else:
            return None
        return encode(response)

    async def _complete(self, response: dict[str, Any]) -> None:
        """Records the router's own answer, and waits for its commit."""
        answer = answer_of(response, tool_call=False)
        assert answer is not None
        self._record(answer)
        await self.wait_committed()

    async def wait_committed(self) -> None:
        """A tool call's row whose answer reaches the client must survive a SIGKILL of the router:
        committed before the answer leaves. If it could not be written the client still gets its
        answer (counted)."""
        recorder = self.hooks.recorder
        if recorder is not None and self.is_tool_call and not await recorder.committed():
            log.warning("call answered without its record session=%s ref=%s", self.session.id, self.ref_id)

    def _record(self, answer: WorkerAnswer) -> None:
        """Records an answer that is not a tool's result: an error, another method's, the router's."""
        kept = encode(answer.result if answer.error is None else answer.error)
        error = kept.decode() if answer.error is not None else None
        self._keep("error" if answer.is_error else "success", kept, error, None)

    def _keep(
        self, status: str, result: bytes, error: str | None, facts: Extracted | None,
        *, parsed: dict[str, Any] | None = None,
    ) -> Extracted | None:
        """The answer's row (``result``: its result or error, encoded; ``parsed``: the same result
        as an object, for the record to read its linked files from) and outcome; ``facts`` back,
        with the linked snapshot if it was read for that."""
        self.done = True
        self._write_request()
        recorder = self.hooks.recorder
        if recorder is not None:
            connection = self.session.connection
            worker_dir = connection.worker.output_dir if connection is not None else None
            # All there is to keep may be in the text, or in a snapshot file read now: then no
            # file is looked at later.
            now = facts.for_record(worker_dir) if facts is not None else None
            snapshot, console = now or (None, None)
            if facts is not None and facts.page_snapshot is None and snapshot is not None:
                facts = dataclasses.replace(facts, linked_snapshot=snapshot)  # read once, used twice
            recorder.response(
                self.ref_id,
                status=status,
                # Files to read or keep: the writer reads them from the parsed result, not from its text.
                result=parsed if now is None and parsed is not None else result,
                page_snapshot=snapshot,
                console_logs=console,
                error=error,
                duration_ms=self._elapsed_ms(),
                output_dir=worker_dir if now is None else None,
            )
        self._end(status)
        return facts

    def _end(self, status: str) -> None:
        self.outcome = (status, self._elapsed_ms())

    def finish(self) -> None:
        """Counts the exchange and writes its log line, once: called when the client has its
        answer, so the ~0.1 ms these take is not on the answer's path."""
        self._write_request()  # a request cut short before it left, or before any answer
        if self.outcome is None:
            return
        if self.is_tool_call and (browsers := self.hooks.browsers) is not None:
            browsers.called(self.session)
        (status, ms), self.outcome = self.outcome, None
        if (metrics := self.hooks.metrics) is not None:
            metrics.call_done(self.message.method or "", self.message.tool_name, status, ms / 1000, self.timing)
        if self.is_tool_call:
            log.info(
                "call session=%s ref=%s tool=%s status=%s ms=%.1f",
                self.session.id,
                self.ref_id,
                self.message.tool_name,
                status,
                ms,
                extra={
                    "session": self.session.id,
                    "ref_id": self.ref_id,
                    "tool": self.message.tool_name,
                    "status": status,
                    "duration_ms": round(ms, 1),
                },
            )

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

