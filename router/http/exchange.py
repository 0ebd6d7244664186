"""One client request's life: its ref_id, its record, and what the router does to its answer."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from router.catalog.paging import CatalogError
from router.http.errors import error_body
from router.http.messages import ClientMessage
from router.http.sse import encode_event, event_data, event_id
from router.http.timing import RequestTiming
from router.http.tool_policy import ToolPolicy
from router.record import tools
from router.record.ref_ids import RefIds
from router.record.snapshots import Extracted, summarize

if TYPE_CHECKING:
    from router.catalog.answers import Catalog
    from router.operator.metrics import Metrics
    from router.record.recorder import Recorder
    from router.sessions.browser_watch import BrowserWatches
    from router.sessions.table import Session

log = logging.getLogger("mcp_router.calls")

INVALID_PARAMS: Final = -32602
# LSP's "RequestCancelled", as the MCP SDKs' clients know it; a client ignores any answer to a
# request it cancelled, but its HTTP request must still end.
REQUEST_CANCELLED: Final = -32800
CANCELLED_MESSAGE: Final = "Request cancelled"
CANCELLED_BEFORE_SENT: Final = "cancelled by the client before it reached the worker"


class RequestCancelled(Exception):
    """The client cancelled the request before it was sent to a worker: it is not sent."""


class ToolAnswerHook(Protocol):
    """Notes a tool answer's page URL and, with ``notice``, adds a pending resume notice to it;
    True when it changed the answer (``router/sessions/resume_notice.py``)."""

    def __call__(
        self, session: Session, response: dict[str, Any], facts: Extracted, *, notice: bool = True
    ) -> bool: ...


@dataclass(frozen=True)
class ExchangeHooks:
    """What an exchange may use, handed over explicitly once by the app."""

    recorder: Recorder | None
    metrics: Metrics | None
    tool_policy: ToolPolicy
    # Answers the router gives itself while a session has no worker (ping, cached tools/list).
    cached_answer: Callable[[Session, ClientMessage], dict[str, Any] | None]
    renew_browser: Callable[[Session], Awaitable[str]]
    on_tool_answer: ToolAnswerHook
    # resources/* and prompts/*, answered from the record and the prompt files (router/catalog/).
    catalog: Catalog | None = None
    # Told of each tool call done, so a browser that dies under its worker is noticed.
    browsers: BrowserWatches | None = None
    ref_ids: RefIds = field(default_factory=RefIds)


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
    # A tool answer (parsed, or the worker's bytes) whose text after_answer() reads once it has left.
    _read_later: dict[str, Any] | bytes | None = field(default=None, init=False)
    _row: int = field(default=0, init=False)  # the answer's record item (Recorder.response), 0: none

    def __post_init__(self) -> None:
        if not self.ref_id:
            self.ref_id = self.hooks.ref_ids.next()

    def record_request(self) -> None:
        """The request's row, once: called as the request leaves for the worker (so enqueueing
        it is done while the worker works, not before the request goes), and by the answer or the
        failure at the latest."""
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
        if self.is_tool_call and not self.hooks.tool_policy.allows(name):
            error = {"code": INVALID_PARAMS, "message": f"Tool {name!r} is not available through this router"}
            response = {"jsonrpc": "2.0", "id": message.id, "error": error}
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
            body = json.dumps(response).encode()
            return self._rewrite(response, body) or body
        await self._complete(response)
        return json.dumps(response).encode()

    async def answer_event(self, event: bytes) -> bytes:
        """One SSE event of the worker's answer stream; the one holding our response is recorded."""
        if self.done:
            return event
        data = event_data(event)
        if not data:
            return event
        replaced = await self._answer(data)
        return event if replaced is None else encode_event(replaced, event_id(event))

    async def answer_json(self, body: bytes) -> bytes:
        replaced = await self._answer(body)
        return body if replaced is None else replaced

    async def failed(self, error: str) -> None:
        """The request got no answer from its worker; the client gets ``error`` instead, and
        (a tool call) only once that is in the record, as an answer would be."""
        if self.done:
            return
        self.done = True
        self.record_request()
        recorder = self.hooks.recorder
        if recorder is not None:
            recorder.response(self.ref_id, status="error", result=None, error=error, duration_ms=self._elapsed_ms())
            if self.is_tool_call and not await recorder.write_ahead():
                log.warning("call failed without its record session=%s ref=%s", self.session.id, self.ref_id)
        self._end("error")

    async def cancelled(self) -> bytes:
        """The answer to a request the client cancelled before it reached a worker, recorded."""
        await self.failed(CANCELLED_BEFORE_SENT)
        return error_body(REQUEST_CANCELLED, CANCELLED_MESSAGE, None, self.message.id)

    async def _answer(self, payload: bytes) -> bytes | None:
        taken = self.take_answer(payload)
        if taken is None:
            return None
        await self.write_ahead()
        return None if taken is payload else taken

    def take_answer(self, payload: bytes) -> bytes | None:
        """When ``payload`` is the answer to this request: records it (the write-ahead it must
        wait for is the caller's) and returns what the client gets (``payload`` itself when
        untouched); else None, and nothing is done.

        A tool answer's text is read after it has left (``after_answer``: the page URL, the
        catalog's notifications), and its row's snapshot and console by the record as it writes
        the row (``RowWriter``): only a resume notice to add or a compact answer needs it read
        first. Else it is not even parsed on its way when it can be helped (``_take_unread``)."""
        read_first = self.session.resumed_notice is not None or self.session.response_mode == "compact"
        if self.is_tool_call and not read_first and (unread := self._take_unread(payload)) is not None:
            return unread
        try:
            parsed = json.loads(payload)
        except ValueError:
            return None
        if not (
            isinstance(parsed, dict)
            and parsed.get("id") == self.message.id
            and ("result" in parsed or "error" in parsed)
        ):
            return None
        result = parsed.get("result")
        facts = None
        if self.is_tool_call and isinstance(result, dict):
            if read_first:
                facts = summarize(result)
            else:
                self._read_later = parsed
        facts = self._record(parsed, facts, payload=payload)
        replaced = self._rewrite(parsed, payload, facts)
        return payload if replaced is None else replaced

    def _take_unread(self, payload: bytes) -> bytes | None:
        """``take_answer`` for a successful tool answer in the SDKs' compact form, from its bytes
        alone (parsed once it has left; a small page's snapshot answer took ~40 µs to parse on its
        way). None for any other, parsed as usual: one whose result's bytes hold ``"isError"`` or
        ``"error"`` (quotes in JSON strings are escaped: nearly only the members themselves do)."""
        parts = tools.compact_parts(payload, "result")
        if parts is None:
            return None
        result, raw_id = parts
        if not result.startswith(b"{") or b'"isError"' in result or b'"error"' in result:
            return None
        try:
            same = json.loads(raw_id) == self.message.id
        except ValueError:  # compact_parts' pattern lets by what JSON does not ("01", "\x")
            same = False
        spliced = tools.splice_ref_meta(payload, self.ref_id) if same else None
        if spliced is None:
            return None
        self._read_later = payload
        self._keep("success", result, None, None)
        return spliced

    def after_answer(self) -> None:
        """What a tool answer's text tells the router, read once the client has the answer: the
        page URL and the refs' frame (``on_tool_answer``), and the catalog's notifications."""
        later, self._read_later = self._read_later, None
        if later is None:
            return
        try:
            result = (json.loads(later) if isinstance(later, bytes) else later)["result"]
        except (ValueError, KeyError, TypeError):  # taken unparsed (_take_unread), and not JSON after all
            log.warning("a tool answer not read: not JSON session=%s ref=%s", self.session.id, self.ref_id)
            return
        facts = summarize(result)  # a dict: the answer was taken with a result that is an object
        if self._row and (recorder := self.hooks.recorder) is not None:
            recorder.answer_read(self._row, facts)  # its row need not read the text again
        if self.hooks.catalog is not None:
            self.hooks.catalog.after_tool_answer(self.session, self.message.tool_name, facts)
        # A notice is the next answer's: this one has left.
        self.hooks.on_tool_answer(self.session, {"result": result}, facts, notice=False)

    def _rewrite(self, response: dict[str, Any], payload: bytes, facts: Extracted | None = None) -> bytes | None:
        """What the client gets instead of the worker's bytes, or None for the bytes untouched."""
        if "result" not in response:
            return None
        method = self.message.method
        catalog = self.hooks.catalog
        if method == "initialize" and catalog is not None:
            response["result"] = catalog.with_capabilities(response["result"])
            return json.dumps(response).encode()
        if method == "tools/list":
            result = self.hooks.tool_policy.filter_list(response["result"])
            response["result"] = tools.with_router_tools(result)
            return json.dumps(response).encode()
        if method != "tools/call":
            return None
        if facts is None:  # read after the answer left (after_answer), or no result to read
            return tools.with_ref_meta(response, payload, self.ref_id) if self._read_later is not None else None
        if catalog is not None:
            catalog.after_tool_answer(self.session, self.message.tool_name, facts)
        # Notes the page URL; the first answer after a resume gets a notice.
        if self.hooks.on_tool_answer(self.session, response, facts):
            payload = json.dumps(response, separators=(",", ":")).encode()  # the form splice_ref_meta reads
        if self.session.response_mode == "compact":
            compacted = tools.compact(response["result"], facts, ref_id=self.ref_id, tool=self.message.tool_name)
            if compacted is not response["result"]:
                response["result"] = compacted
                return json.dumps(response).encode()
        return tools.with_ref_meta(response, payload, self.ref_id)

    async def _complete(self, response: dict[str, Any]) -> None:
        """Records the router's own answer, and waits for its write-ahead."""
        self._record(response)
        await self.write_ahead()

    async def write_ahead(self) -> None:
        """A tool call's row whose answer reaches the client must survive a SIGKILL of the router:
        in the write-ahead file now, committed by finish(). If it could not be written the client
        still gets its answer (counted)."""
        recorder = self.hooks.recorder
        if recorder is not None and self.is_tool_call and not await recorder.write_ahead():
            log.warning("call answered without its record session=%s ref=%s", self.session.id, self.ref_id)

    def _record(
        self, response: dict[str, Any], facts: Extracted | None = None, *, payload: bytes | None = None
    ) -> Extracted | None:
        """Records the answer (from the worker's own bytes, ``payload``, when it has them: kept as
        they are); without ``facts``, the record reads the snapshot and console (``RowWriter``)."""
        result = response.get("result")
        error = response.get("error")
        is_error = error is not None or (isinstance(result, dict) and result.get("isError") is True)
        kept = tools.raw_member(payload, "result" if error is None else "error") if payload else None
        return self._keep(
            "error" if is_error else "success",
            kept if kept is not None else json.dumps(result if error is None else error),
            json.dumps(error) if error is not None else None,
            facts,
        )

    def _keep(self, status: str, result: bytes | str, error: str | None, facts: Extracted | None) -> Extracted | None:
        """The answer's row (``result``: its result or error, the worker's bytes or encoded) and
        outcome; ``facts`` back, with the linked snapshot if it was read for that."""
        self.done = True
        self.record_request()
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
            self._row = recorder.response(
                self.ref_id,
                status=status,
                result=result,
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
        answer, so the ~0.1 ms these take is not on the answer's path; so is the commit of what
        the answer's write-ahead holds."""
        self.record_request()  # a request cut short before it left, or before any answer
        if (recorder := self.hooks.recorder) is not None:
            recorder.settle()
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

