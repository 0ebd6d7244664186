"""A raw Streamable-HTTP client, so tests see every status code and header, and answer helpers."""

from __future__ import annotations

import json
import re
import socket
from typing import Any

import httpx

from tests.support.auth import TEST_TOKEN, auth_headers
from tests.support.sse import messages_of

ACCEPT_BOTH = "application/json, text/event-stream"
CLIENT_TIMEOUT = 30.0
REF_KEY = "mcp-router/refId"
_SNAPSHOT_REF = re.compile(r"\[ref=((?:f\d+)?e\d+)\]")  # "f1e3": a tab's later documents


def initialize_body(id: int = 1, version: str = "2025-06-18", name: str = "test-client") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": name, "version": "1"},
        },
    }


def text_of(answer: dict[str, Any]) -> str:
    """The text parts of a tools/call answer, joined."""
    return "".join(p.get("text", "") for p in answer["result"]["content"])


def ref_of(answer: dict[str, Any]) -> str:
    """The record's ref id the router put on a tools/call answer."""
    return str(answer["result"]["_meta"][REF_KEY])


def find_ref(snapshot: str, label: str) -> str:
    """The element ref (``e12``) on the first snapshot line that mentions ``label``."""
    for line in snapshot.splitlines():
        if label in line and (match := _SNAPSHOT_REF.search(line)):
            return match.group(1)
    raise AssertionError(f"no ref for {label!r} in:\n{snapshot}")


def whoami(client: RawClient) -> dict[str, int]:
    """The stand-in worker serving the client's session: its pid and port."""
    text = client.text("whoami")  # "pid=… port=…"
    return {k: int(v) for k, v in (part.split("=") for part in text.split())}


class RawClient:
    """Speaks Streamable HTTP by hand, so tests see every status code and header."""

    def __init__(self, url: str, *, host: str | None = None, token: str | None = TEST_TOKEN) -> None:
        self.url = url
        # The token on every request, those tests send through .http with headers of their own too.
        self.http = httpx.Client(timeout=CLIENT_TIMEOUT, trust_env=False, headers=auth_headers(token))
        self.session_id: str | None = None
        self._next_id = 100
        self.host = host
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        h = {"content-type": "application/json", "accept": ACCEPT_BOTH, **auth_headers(self.token)}
        if self.session_id:
            h["mcp-session-id"] = self.session_id
        if self.host:
            h["host"] = self.host
        h.update(extra)
        return h

    def post(self, body: Any, **headers: str) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(self.url, content=content, headers=self.headers(**headers))

    def initialize(self, **kw: Any) -> httpx.Response:
        response = self.post(initialize_body(**kw))
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        note = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert note.status_code == 202, note.text
        return response

    def start_worker(self) -> None:
        """Sessions start their worker at the first request that needs one: make that happen."""
        assert "pid=" in self.text("whoami")

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            body["params"] = params
        response = self.post(body)
        assert response.status_code == 200, response.text
        answers = [m for m in messages_of(response) if m.get("id") == self._next_id]
        assert answers, response.text
        return answers[-1]

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def text(self, tool: str, **arguments: Any) -> str:
        answer = self.call(tool, **arguments)
        assert "result" in answer, answer
        return text_of(answer)

    def delete(self) -> httpx.Response:
        return self.http.delete(self.url, headers=self.headers())

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def raw_post(session: RawClient, body: bytes, *extra: str, chunked: bool = False) -> bytes:
    """A POST of ``body`` on ``session`` as bytes for a raw socket (``extra``: more header lines;
    ``chunked``: the body in two chunks)."""
    assert session.session_id is not None
    lines = [
        "POST /mcp HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Authorization: Bearer {TEST_TOKEN}",
        f"Mcp-Session-Id: {session.session_id}",
        *extra,
    ]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        half = len(body) // 2
        framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:])) + b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}")
        framed = body
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + framed


def read_until_closed(s: socket.socket) -> bytes:
    """Everything a raw socket receives until the server closes (the socket's timeout if never)."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data
