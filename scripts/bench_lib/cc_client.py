"""A client shaped like Claude Code on the wire, raw httpx: what the handshake and reap figures need.

Like Claude Code 2.1.328: initializes with protocol 2025-11-25 and the capabilities
{"roots": {"listChanged": true}, "elicitation": {…}}; opens the GET stream right after
``notifications/initialized`` (before ``tools/list``) and reopens it ~1 s after it ends, without
``Last-Event-ID``; answers ``ping`` and ``roots/list`` (on whichever stream they come) by separate
POSTs; never sends DELETE. Each arrival of a ping is timed, so a run can tell when pings resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from bench_lib.client import ACCEPT, CallError, Endpoint

PROTOCOL: Final = "2025-11-25"
CAPABILITIES: Final = {"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}}
CLIENT_INFO: Final = {"name": "bench-claude-code", "version": "1"}
ROOTS: Final = [{"uri": "file:///tmp/bench-project", "name": "project"}]
REOPEN_DELAY: Final = 1.0  # Claude Code reopens an ended GET stream after ~1 s
CONNECTIONS: Final = 6  # the GET stream, a call in flight, answers to pings and roots/list
CALL_TIMEOUT: Final = 120.0
STREAM_TIMEOUT: Final = httpx.Timeout(None, connect=10.0)  # a held stream may be quiet for long


async def sse_messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """JSON-RPC messages of an SSE body as they arrive (comments and keep-alives skipped)."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                with contextlib.suppress(ValueError):
                    yield json.loads("\n".join(data))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data:
        with contextlib.suppress(ValueError):
            yield json.loads("\n".join(data))


@dataclass
class Handshake:
    initialize_s: float  # the initialize POST, send to answer
    total_s: float  # initialize → initialized → tools/list answered
    tools: int


@dataclass
class CcSession:
    endpoint: Endpoint
    session_id: str | None = None
    pings: list[float] = field(default_factory=list)  # perf_counter() at each ping's arrival
    roots_answered: int = 0
    get_opens: int = 0
    get_statuses: list[int] = field(default_factory=list)
    http: httpx.AsyncClient = field(
        default_factory=lambda: httpx.AsyncClient(
            timeout=httpx.Timeout(CALL_TIMEOUT, connect=10.0),
            limits=httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS),
            trust_env=False,
        )
    )
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _get_task: asyncio.Task[None] | None = None
    _answers: set[asyncio.Task[None]] = field(default_factory=set)

    def _headers(self, *, post: bool = True) -> dict[str, str]:
        h = {"accept": ACCEPT if post else "text/event-stream", **self.endpoint.headers()}
        if post:
            h["content-type"] = "application/json"
        if self.session_id:
            h["mcp-session-id"] = self.session_id
            h["mcp-protocol-version"] = PROTOCOL
        return h

    # -- requests --------------------------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[dict[str, Any], float]:
        """The answer and the seconds it took; server requests on the POST stream are answered."""
        rid = next(self._ids)
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            payload["params"] = params
        start = time.perf_counter()
        async with self.http.stream(
            "POST", self.endpoint.url, content=json.dumps(payload).encode(), headers=self._headers()
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise CallError(f"{self.endpoint.name} {method}: HTTP {response.status_code} {response.text[:300]}")
            if method == "initialize":
                self.session_id = response.headers.get("mcp-session-id")
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                async for message in sse_messages(response):
                    if message.get("id") == rid and "method" not in message:
                        return message, time.perf_counter() - start
                    self._server_message(message)
                raise CallError(f"{self.endpoint.name} {method}: the stream ended without an answer")
            body = await response.aread()
            answer: dict[str, Any] = json.loads(body)
            return answer, time.perf_counter() - start

    async def notify(self, method: str) -> None:
        response = await self.http.post(
            self.endpoint.url,
            content=json.dumps({"jsonrpc": "2.0", "method": method}).encode(),
            headers=self._headers(),
        )
        if response.status_code != 202:
            raise CallError(f"{self.endpoint.name} {method}: HTTP {response.status_code}")

    async def handshake(self) -> Handshake:
        """initialize, notifications/initialized, the GET stream (in the background), tools/list."""
        self.session_id = None
        start = time.perf_counter()
        _, init_s = await self.request(
            "initialize", {"protocolVersion": PROTOCOL, "capabilities": CAPABILITIES, "clientInfo": CLIENT_INFO}
        )
        await self.notify("notifications/initialized")
        self._get_task = asyncio.create_task(self._hold_get_stream())
        answer, _ = await self.request("tools/list")
        if "error" in answer:
            raise CallError(f"{self.endpoint.name} tools/list: {answer['error']}")
        return Handshake(init_s, time.perf_counter() - start, len(answer["result"]["tools"]))

    async def call(self, tool: str, **arguments: Any) -> tuple[str, float]:
        """A tool's text and seconds; a JSON-RPC error or an isError answer raises CallError."""
        answer, elapsed = await self.request("tools/call", {"name": tool, "arguments": arguments})
        if "error" in answer:
            raise CallError(f"{self.endpoint.name} {tool}: {answer['error']}")
        result = answer["result"]
        text = "".join(p.get("text", "") for p in result.get("content", []))
        if result.get("isError") or "### Error" in text:
            raise CallError(f"{self.endpoint.name} {tool}: {text[:300]}")
        return text, elapsed

    async def delete(self) -> None:
        """Ends the session with a DELETE: what `mcp-router stdio` does at EOF (Claude Code never does)."""
        await self.http.delete(self.endpoint.url, headers=self._headers(post=False))

    async def close(self) -> None:
        """Goes away the way Claude Code does: streams dropped, no DELETE."""
        tasks = [t for t in (self._get_task, *self._answers) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.http.aclose()

    # -- what the server asks --------------------------------------------------------------------

    async def _hold_get_stream(self) -> None:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                async with self.http.stream(
                    "GET", self.endpoint.url, headers=self._headers(post=False), timeout=STREAM_TIMEOUT
                ) as response:
                    self.get_opens += 1
                    self.get_statuses.append(response.status_code)
                    if response.status_code == 200:
                        async for message in sse_messages(response):
                            self._server_message(message)
            await asyncio.sleep(REOPEN_DELAY)

    def _server_message(self, message: dict[str, Any]) -> None:
        method, rid = message.get("method"), message.get("id")
        if method is None or rid is None:
            return  # a notification, or a stray answer
        if method == "ping":
            self.pings.append(time.perf_counter())
            result: dict[str, Any] | None = {}
        elif method == "roots/list":
            result = {"roots": ROOTS}
        elif method == "elicitation/create":
            result = {"action": "decline"}
        else:
            result = None
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
        if result is None:
            reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        else:
            reply["result"] = result
        task = asyncio.create_task(self._answer(reply, method == "roots/list"))
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)

    async def _answer(self, reply: dict[str, Any], roots: bool) -> None:
        with contextlib.suppress(httpx.HTTPError):
            response = await self.http.post(
                self.endpoint.url, content=json.dumps(reply).encode(), headers=self._headers()
            )
            if roots and response.status_code == 202:
                self.roots_answered += 1

    def first_ping_after(self, since: float) -> float | None:
        return next((t for t in self.pings if t > since), None)
