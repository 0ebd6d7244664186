"""An MCP session on one worker driven by the router itself.

Two uses. The router's own *control* session (declares no capabilities, so the worker never asks
it anything) launches the browser, saves and restores its state and re-takes snapshots: workers
run with ``--user-data-dir --shared-browser-context``, so it shares the client's browser context.
And the *replay* of a client's recorded ``initialize`` on a new worker, whose session id then
carries the client's own traffic.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import anyio

from router.protocol.sse import EventSplitter, EventTooLarge, event_json
from router.types import H_PROTOCOL_VERSION, H_SESSION_ID, JSON, SSE
from router.upstream.client import UpstreamError, UpstreamResponse

if TYPE_CHECKING:
    from router.upstream.connection import WorkerConnection

CONTROL_TIMEOUT: Final = 30.0  # a tool call that restores a page may load it; generous but bounded
CONTROL_CLIENT_INFO: Final = {"name": "mcp-router-control", "version": "1"}
DEFAULT_PROTOCOL_VERSION: Final = "2025-06-18"
CONTROL_ID_PREFIX: Final = "mcp-router-c"  # never a prefix of asked.WORKER_ID_PREFIX's ids


class ControlError(Exception):
    """The worker refused, failed or answered something unreadable."""


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    content_type: str
    session_id: str | None
    content: bytes


def _answer(response: _Reply, request_id: str) -> dict[str, Any]:
    messages: list[Any]
    if response.content_type.startswith(SSE):
        try:
            messages = [event_json(e) for e in EventSplitter().feed(response.content + b"\n\n")]
        except EventTooLarge as exc:
            raise ControlError(f"answer too large: {exc}") from exc
    else:
        try:
            messages = [json.loads(response.content)]
        except ValueError as exc:
            raise ControlError(f"unreadable answer ({response.status})") from exc
    for message in messages:
        if isinstance(message, dict) and message.get("id") == request_id:
            if "error" in message:
                raise ControlError(f"worker error: {message['error']}")
            result = message.get("result")
            return result if isinstance(result, dict) else {}
    raise ControlError(f"no answer to request {request_id} ({response.status})")


class ControlSession:
    """One MCP session on a worker, driven by the router. ``open`` it, ``call`` tools, ``close``."""

    def __init__(self, connection: WorkerConnection) -> None:
        self.connection = connection
        self.session_id: str | None = None
        self.protocol_version = DEFAULT_PROTOCOL_VERSION
        self.initialize_result: dict[str, Any] = {}
        self.opened_with: dict[str, Any] | None = None  # the initialize params ``open`` was given
        # Strings: the router may call tools on a client's own MCP session (a shared browser's
        # context, hosts.py), beside the client's requests, which an SDK numbers with integers.
        self._ids = (f"{CONTROL_ID_PREFIX}{n}" for n in itertools.count(1))
        # A tool call was answered: the worker gave this session its share of the browser, which
        # Playwright closes only when its last session sharing it ends.
        self.shares_browser = False

    def _headers(self) -> list[tuple[bytes, bytes]]:
        headers = [
            (b"host", self.connection.host_header.encode()),
            (b"content-type", JSON.encode()),
            (b"accept", f"{JSON}, {SSE}".encode()),
        ]
        if self.session_id is not None:
            headers += [
                (H_SESSION_ID.encode(), self.session_id.encode()),
                (H_PROTOCOL_VERSION.encode(), self.protocol_version.encode()),
            ]
        return headers

    async def _post(self, body: dict[str, Any]) -> _Reply:
        """One request over the worker's kept-alive sockets; UpstreamError or TimeoutError."""
        with anyio.fail_after(CONTROL_TIMEOUT):
            response = await self.connection.send("POST", self._headers(), json.dumps(body).encode())
            try:
                content = await response.aread()
            finally:
                await response.aclose()
        if response.status_code >= 400:
            text = content[:200].decode("utf-8", "replace")
            raise ControlError(f"worker answered {response.status_code}: {text}")
        session_id = response.header(H_SESSION_ID.encode())
        return _Reply(
            response.status_code, response.content_type, session_id.decode() if session_id else None, content
        )

    async def open(self, initialize_params: dict[str, Any] | None = None) -> str:
        """The handshake: initialize (the client's recorded params, or our own) + initialized."""
        self.opened_with = initialize_params
        params = initialize_params or {
            "protocolVersion": DEFAULT_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": CONTROL_CLIENT_INFO,
        }
        request_id = next(self._ids)
        try:
            response = await self._post({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params})
            result = _answer(response, request_id)
            self.initialize_result = result
            session_id = response.session_id
            if not session_id:
                raise ControlError("worker issued no session id")
            self.session_id = session_id
            version = result.get("protocolVersion")
            if isinstance(version, str):
                self.protocol_version = version
            await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except (UpstreamError, TimeoutError) as exc:
            raise ControlError(f"handshake failed: {type(exc).__name__}: {exc}") from exc
        return session_id

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> str:
        """The text of a tool's answer; ControlError when the tool reports an error."""
        return answer_text(await self.call_result(tool, arguments), tool)

    async def call_result(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """A tool's whole result (its images too); ControlError when the tool reports an error."""
        request_id = next(self._ids)
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments or {}},
        }
        try:
            result = _answer(await self._post(body), request_id)
        except (UpstreamError, TimeoutError) as exc:
            raise ControlError(f"{tool} failed: {type(exc).__name__}: {exc}") from exc
        self.shares_browser = True
        answer_text(result, tool)  # raises for an error
        return result

    async def answer(self, message: dict[str, Any]) -> None:
        """A JSON-RPC answer to what the worker asked this session (a ping, ``roots/list``)."""
        try:
            await self._post(message)
        except (UpstreamError, TimeoutError) as exc:
            raise ControlError(f"answer refused: {type(exc).__name__}: {exc}") from exc

    async def open_stream(self) -> UpstreamResponse:
        """This session's GET stream on the worker (the caller reads and closes it)."""
        headers = [(k, v) for k, v in self._headers() if k not in (b"content-type", b"accept")]
        try:
            response = await self.connection.send("GET", [*headers, (b"accept", SSE.encode())])
        except UpstreamError as exc:
            raise ControlError(f"stream refused: {exc}") from exc
        if response.status_code != 200:
            await response.aclose()
            raise ControlError(f"stream refused: HTTP {response.status_code}")
        return response

    async def list_tools(self) -> dict[str, Any]:
        """The worker's whole ``tools/list`` result."""
        request_id = next(self._ids)
        try:
            return _answer(await self._post({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}), request_id)
        except (UpstreamError, TimeoutError) as exc:
            raise ControlError(f"tools/list failed: {exc}") from exc

    async def tool_names(self) -> set[str]:
        result = await self.list_tools()
        return {t.get("name", "") for t in result.get("tools", []) if isinstance(t, dict)}

    async def close(self) -> None:
        """DELETE, so the worker keeps no session (and no ping timer) for us."""
        if self.session_id is None:
            return
        session_id, self.session_id = self.session_id, None
        await self.connection.delete_session(session_id)  # the worker may be on its way out


def answer_text(result: dict[str, Any], tool: str) -> str:
    """The text parts of a tool's result; ControlError when it reports an error."""
    text = "".join(part.get("text", "") for part in result.get("content", []) if isinstance(part, dict))
    if result.get("isError") is True or text.startswith("### Error"):
        raise ControlError(f"{tool}: {text[:300]}")
    return text
