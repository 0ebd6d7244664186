"""An MCP session on one worker driven by the router itself.

Two uses. The router's own *control* session (declares no capabilities, so the worker never asks
it anything) launches the browser, saves and restores its state and re-takes snapshots: workers
run with ``--user-data-dir --shared-browser-context``, so it shares the client's browser context.
And the *replay* of a client's recorded ``initialize`` on a new worker, whose session id then
carries the client's own traffic.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any, Final

import httpx

from router.http.sse import EventSplitter, EventTooLarge, event_json
from router.types import H_SESSION_ID, JSON, SSE

CONTROL_TIMEOUT: Final = 30.0  # a tool call that restores a page may load it; generous but bounded
CONTROL_CLIENT_INFO: Final = {"name": "mcp-router-control", "version": "1"}
DEFAULT_PROTOCOL_VERSION: Final = "2025-06-18"


class ControlError(Exception):
    """The worker refused, failed or answered something unreadable."""


def _answer(response: httpx.Response, request_id: int) -> dict[str, Any]:
    content_type = response.headers.get("content-type", "")
    messages: list[Any]
    if content_type.startswith(SSE):
        try:
            messages = [event_json(e) for e in EventSplitter().feed(response.content + b"\n\n")]
        except EventTooLarge as exc:
            raise ControlError(f"answer too large: {exc}") from exc
    else:
        try:
            messages = [json.loads(response.content)]
        except ValueError as exc:
            raise ControlError(f"unreadable answer ({response.status_code})") from exc
    for message in messages:
        if isinstance(message, dict) and message.get("id") == request_id:
            if "error" in message:
                raise ControlError(f"worker error: {message['error']}")
            result = message.get("result")
            return result if isinstance(result, dict) else {}
    raise ControlError(f"no answer to request {request_id} ({response.status_code})")


class ControlSession:
    """One MCP session on a worker, driven by the router. ``open`` it, ``call`` tools, ``close``."""

    def __init__(self, client: httpx.AsyncClient, url: str, host_header: str) -> None:
        self.client = client
        self.url = url
        self.host_header = host_header
        self.session_id: str | None = None
        self.protocol_version = DEFAULT_PROTOCOL_VERSION
        self.initialize_result: dict[str, Any] = {}
        self.opened_with: dict[str, Any] | None = None  # the initialize params ``open`` was given
        self._ids = itertools.count(1)  # JSON-RPC ids are per session

    def _headers(self) -> dict[str, str]:
        headers = {"host": self.host_header, "content-type": JSON, "accept": f"{JSON}, {SSE}"}
        if self.session_id is not None:
            headers[H_SESSION_ID] = self.session_id
            headers["mcp-protocol-version"] = self.protocol_version
        return headers

    async def _post(self, body: dict[str, Any]) -> httpx.Response:
        response = await self.client.post(
            self.url, content=json.dumps(body).encode(), headers=self._headers(), timeout=CONTROL_TIMEOUT
        )
        if response.status_code >= 400:
            raise ControlError(f"worker answered {response.status_code}: {response.text[:200]}")
        return response

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
            session_id: str | None = response.headers.get(H_SESSION_ID)
            if not session_id:
                raise ControlError("worker issued no session id")
            self.session_id = session_id
            version = result.get("protocolVersion")
            if isinstance(version, str):
                self.protocol_version = version
            await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except httpx.HTTPError as exc:
            raise ControlError(f"handshake failed: {type(exc).__name__}: {exc}") from exc
        return session_id

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> str:
        """The text of a tool's answer; ControlError when the tool reports an error."""
        request_id = next(self._ids)
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments or {}},
        }
        try:
            result = _answer(await self._post(body), request_id)
        except httpx.HTTPError as exc:
            raise ControlError(f"{tool} failed: {type(exc).__name__}: {exc}") from exc
        text = "".join(part.get("text", "") for part in result.get("content", []) if isinstance(part, dict))
        if result.get("isError") is True or text.startswith("### Error"):
            raise ControlError(f"{tool}: {text[:300]}")
        return text

    async def list_tools(self) -> dict[str, Any]:
        """The worker's whole ``tools/list`` result."""
        request_id = next(self._ids)
        try:
            return _answer(await self._post({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}), request_id)
        except httpx.HTTPError as exc:
            raise ControlError(f"tools/list failed: {exc}") from exc

    async def tool_names(self) -> set[str]:
        result = await self.list_tools()
        return {t.get("name", "") for t in result.get("tools", []) if isinstance(t, dict)}

    async def close(self) -> None:
        """DELETE, so the worker keeps no session (and no ping timer) for us."""
        if self.session_id is None:
            return
        session_id, self.session_id = self.session_id, None
        # The worker may be on its way out; nothing is left to clean either way.
        with contextlib.suppress(httpx.HTTPError):
            await self.client.delete(
                self.url, headers={"host": self.host_header, H_SESSION_ID: session_id}, timeout=CONTROL_TIMEOUT
            )
