"""The ASGI apps of the floor phase (floor.py), each run by uvicorn as the router runs (uvloop,
httptools). ``answer`` stands in for a worker: a fixed SSE answer of a tool call's size. ``relay``
(a factory) forwards each request to its upstream (``answer``, or a real worker in the latency
rounds) through the router's own upstream client with the MCP headers, and relays the status, the
MCP headers and the bytes back; ``recording_relay`` also parses both bodies and commits one row per
call to a SQLite WAL file before answering, the least a recording proxy must do. Nothing else of
the router runs: no sessions, no security, no record's schema, no continuity."""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any, Final

from router.http.upstream_pool import UpstreamPool

ANSWER: Final = (
    b"event: message\ndata: "
    + json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "### Open tabs\n" + "x" * 600}]}}
    ).encode()
    + b"\n\n"
)
SSE_HEAD: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
# What a worker needs of a client's request, and what a client needs of a worker's answer.
FORWARDED: Final = frozenset({b"content-type", b"accept", b"mcp-session-id", b"mcp-protocol-version"})
RETURNED: Final = (b"content-type", b"cache-control", b"mcp-session-id")
UPSTREAM_PORT_ENV: Final = "FLOOR_UPSTREAM_PORT"
DB_ENV: Final = "FLOOR_DB"


async def _body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body", False):
            return body


async def answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await _body(receive)
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEAD})
    await send({"type": "http.response.body", "body": ANSWER})


class _Relay:
    def __init__(self, *, record: bool) -> None:
        self.record = record
        self.pool: UpstreamPool | None = None
        self.host = b""
        self.db: sqlite3.Connection | None = None

    def _ready(self) -> tuple[UpstreamPool, sqlite3.Connection | None]:
        if self.pool is None:
            port = int(os.environ[UPSTREAM_PORT_ENV])
            self.pool = UpstreamPool("127.0.0.1", port, "/mcp")
            self.host = b"localhost:%d" % port  # a worker accepts its own Host only
            if self.record:
                self.db = sqlite3.connect(os.environ[DB_ENV], isolation_level=None)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.execute("CREATE TABLE calls (id INTEGER PRIMARY KEY, method TEXT, request TEXT, answer TEXT)")
        return self.pool, self.db

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        pool, db = self._ready()
        body = await _body(receive)
        headers = [(name, value) for name, value in scope["headers"] if name in FORWARDED]
        headers.append((b"host", self.host))
        upstream = await pool.request(scope["method"], headers, body)
        answered = await upstream.aread()
        await upstream.aclose()
        returned = [(name, value) for name in RETURNED if (value := upstream.header(name)) is not None]
        # A notification's 202 has no body, a DELETE no request; an error's status goes back as is.
        if db is not None and body and answered and upstream.status_code == 200:
            request = json.loads(body)
            data = answered.split(b"data: ", 1)[-1].split(b"\n\n", 1)[0]  # the first event's data
            json.loads(data)
            db.execute("BEGIN")
            db.execute(
                "INSERT INTO calls (method, request, answer) VALUES (?, ?, ?)",
                (request.get("method"), body.decode(), data.decode()),
            )
            db.execute("COMMIT")
        await send({"type": "http.response.start", "status": upstream.status_code, "headers": returned})
        await send({"type": "http.response.body", "body": answered})


def relay() -> _Relay:
    return _Relay(record=False)


def recording_relay() -> _Relay:
    return _Relay(record=True)
