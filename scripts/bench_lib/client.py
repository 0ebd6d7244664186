"""A minimal Streamable-HTTP MCP client on one keep-alive httpx connection pool, timed per call."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

ACCEPT = "application/json, text/event-stream"
VERSION = "2025-06-18"


class CallError(RuntimeError):
    pass


def _messages(response: httpx.Response) -> list[dict[str, Any]]:
    body = response.content
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        out = []
        for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
            data = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
            if data:
                out.append(json.loads(b"\n".join(data)))
        return out
    return [json.loads(body)] if body else []


@dataclass
class Endpoint:
    """Where a target listens: URL, the Host header it wants, and the router's token if it has one."""

    name: str
    url: str
    host: str | None = None
    token: str | None = None

    @property
    def base(self) -> str:
        """The URL without the MCP path: where /healthz and /api/ live."""
        return self.url.rsplit("/", 1)[0]

    def headers(self) -> dict[str, str]:
        """What every request to this target carries (MCP, /api/ and /healthz alike): the one place
        for Host and Authorization."""
        h: dict[str, str] = {}
        if self.host:
            h["host"] = self.host
        if self.token:
            h["authorization"] = f"Bearer {self.token}"
        return h


@dataclass
class McpSession:
    endpoint: Endpoint
    http: httpx.AsyncClient
    session_id: str | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def _headers(self) -> dict[str, str]:
        h = {"content-type": "application/json", "accept": ACCEPT, **self.endpoint.headers()}
        if self.session_id:
            h["mcp-session-id"] = self.session_id
            h["mcp-protocol-version"] = VERSION
        return h

    async def _post(self, payload: dict[str, Any]) -> httpx.Response:
        return await self.http.post(self.endpoint.url, content=json.dumps(payload).encode(), headers=self._headers())

    async def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[dict[str, Any], float]:
        """The answer and the seconds it took (send to last byte)."""
        rid = next(self._ids)
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            payload["params"] = params
        start = time.perf_counter()
        response = await self._post(payload)
        elapsed = time.perf_counter() - start
        if response.status_code != 200:
            raise CallError(f"{self.endpoint.name} {method}: HTTP {response.status_code} {response.text[:300]}")
        answers = [m for m in _messages(response) if m.get("id") == rid]
        if not answers:
            raise CallError(f"{self.endpoint.name} {method}: no answer in {response.text[:300]}")
        if method == "initialize":
            self.session_id = response.headers.get("mcp-session-id")
        return answers[-1], elapsed

    async def initialize(self) -> float:
        self.session_id = None
        _, elapsed = await self.request(
            "initialize",
            {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
        )
        response = await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if response.status_code != 202:
            raise CallError(f"{self.endpoint.name} initialized: HTTP {response.status_code}")
        return elapsed

    async def call(self, tool: str, **arguments: Any) -> tuple[str, float]:
        answer, elapsed = await self.request("tools/call", {"name": tool, "arguments": arguments})
        if "error" in answer:
            raise CallError(f"{self.endpoint.name} {tool}: {answer['error']}")
        result = answer["result"]
        text = "".join(p.get("text", "") for p in result.get("content", []))
        if result.get("isError"):
            raise CallError(f"{self.endpoint.name} {tool}: {text[:300]}")
        return text, elapsed

    async def delete(self) -> None:
        if self.session_id:
            with contextlib.suppress(httpx.HTTPError):
                await self.http.delete(self.endpoint.url, headers=self._headers(), timeout=10)
            self.session_id = None

    async def close(self) -> None:
        """Its connections closed (the session stays, as a client that went away leaves it)."""
        await self.http.aclose()


def new_http(connections: int = 4) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(60.0, connect=10.0),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        trust_env=False,
    )
