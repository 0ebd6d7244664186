"""The floor's bare relay in Python without ASGI: asyncio protocols on uvloop, httptools parsing
both sides, what a socket costs in Python. Each client connection gets one kept-alive socket to
127.0.0.1:FLOOR_UPSTREAM_PORT. A request goes up with the MCP headers and the worker's own Host;
the answer comes back with the status and the MCP headers, its body relayed chunk by chunk as it
arrives (re-chunked: an SSE stream stays a stream). With ``--record DB`` it also parses both
bodies and commits one row per call to a SQLite WAL file before the answer's last chunk, the
least a recording proxy must do. With ``--record-ahead DB`` it keeps the same promise the router's
way: the row goes into an append-only file (one ``write()``) before the answer's last chunk, and
into SQLite in batches, one transaction per AHEAD_BATCH_DELAY. Nothing else: no sessions, no
security, no record's schema.

Usage: python raw_relay.py PORT[:UPSTREAM]... [--record[-ahead] DB]: each PORT relays to its UPSTREAM, else to
FLOOR_UPSTREAM_PORT from the environment; several pairs are one process with one record, as one
router serves many sessions (the floor under the router's CPU at N sessions, load_floor.py)."""

from __future__ import annotations

import asyncio
import json
import marshal
import os
import sqlite3
import struct
import sys
import zlib
from typing import Final, cast

import httptools
import uvloop

UPSTREAM_PORT_ENV: Final = "FLOOR_UPSTREAM_PORT"
# What a worker needs of a client's request, and what a client needs of a worker's answer.
FORWARDED: Final = frozenset({b"content-type", b"accept", b"mcp-session-id", b"mcp-protocol-version"})
RETURNED: Final = frozenset({b"content-type", b"cache-control", b"mcp-session-id"})
LAST_CHUNK: Final = b"0\r\n\r\n"
AHEAD_BATCH_DELAY: Final = 0.05  # the written-ahead rows go into SQLite this long after the first
FRAME: Final = struct.Struct("<II")  # length, CRC-32
INSERT: Final = "INSERT INTO calls (method, request, answer) VALUES (?, ?, ?)"


class Recorder:
    def __init__(self, path: str, *, ahead: bool = False) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE calls (id INTEGER PRIMARY KEY, method TEXT, request TEXT, answer TEXT)")
        self.ahead = os.open(path + "-ahead", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if ahead else None
        self.pending: list[tuple[str, str, str]] = []

    def call(self, request: bytes, answer: bytes) -> None:
        method = json.loads(request).get("method")
        data = answer.split(b"data: ", 1)[-1].split(b"\n\n", 1)[0]  # the first event's data
        json.loads(data)
        row = (method, request.decode(), data.decode())
        if self.ahead is None:
            self.db.execute("BEGIN")
            self.db.execute(INSERT, row)
            self.db.execute("COMMIT")
            return
        payload = marshal.dumps(row)  # framed as the router's write-ahead file frames its rows
        os.write(self.ahead, FRAME.pack(len(payload), zlib.crc32(payload)) + payload)
        if not self.pending:
            asyncio.get_running_loop().call_later(AHEAD_BATCH_DELAY, self._commit)
        self.pending.append(row)

    def _commit(self) -> None:
        rows, self.pending = self.pending, []
        self.db.execute("BEGIN")
        self.db.executemany(INSERT, rows)
        self.db.execute("COMMIT")


class Upstream(asyncio.Protocol):
    """The worker's side of one client connection: parses each answer and relays it."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.head: list[bytes] = []
        self.body: list[bytes] = []
        self.answering = False
        self.chunked = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.upstream_lost(mid_answer=self.answering)

    def on_message_begin(self) -> None:
        self.answering = True
        self.head = []
        self.body = []

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in RETURNED:
            self.head.append(b"%s: %s\r\n" % (name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        framing = b"transfer-encoding: chunked\r\n" if status != 202 else b"content-length: 0\r\n"
        self.client.write(b"HTTP/1.1 %d \r\n%s%b\r\n" % (status, b"".join(self.head), framing))
        self.chunked = status != 202

    def on_body(self, body: bytes) -> None:
        if self.client.recorder is not None:
            self.body.append(body)  # held to the commit, as the recording relay holds it
        else:
            self.client.write(b"%x\r\n%b\r\n" % (len(body), body))

    def on_message_complete(self) -> None:
        self.answering = False
        if not self.chunked:
            return
        if self.client.recorder is not None and self.body:
            answer = b"".join(self.body)
            if self.parser.get_status_code() == 200 and self.client.request_body:
                self.client.recorder.call(self.client.request_body, answer)
            self.client.write(b"%x\r\n%b\r\n%b" % (len(answer), answer, LAST_CHUNK))
        else:
            self.client.write(LAST_CHUNK)


class Client(asyncio.Protocol):
    """One client connection: parses each request and sends it up its own upstream socket."""

    def __init__(self, upstream_port: int, recorder: Recorder | None) -> None:
        self.upstream_port = upstream_port
        self.recorder = recorder
        self.host = b"host: localhost:%d\r\n" % upstream_port  # a worker accepts its own Host only
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.upstream: Upstream | None = None
        self.connecting: list[bytes] | None = None  # requests waiting for the upstream socket
        self.url = b""
        self.head: list[bytes] = []
        self.body: list[bytes] = []
        self.request_body = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def upstream_lost(self, *, mid_answer: bool) -> None:
        # An idle kept-alive socket the worker closed is opened again by the next request.
        self.upstream = None
        if mid_answer and self.transport is not None:
            self.transport.close()

    def on_message_begin(self) -> None:
        self.head = []
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in FORWARDED:
            self.head.append(b"%s: %s\r\n" % (name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        self.request_body = body
        method = self.parser.get_method()
        request = b"%s %s HTTP/1.1\r\n%s%bcontent-length: %d\r\n\r\n%b" % (
            method, self.url, self.host, b"".join(self.head), len(body), body
        )
        self._send(request)

    def _send(self, request: bytes) -> None:
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None and not upstream.transport.is_closing():
            upstream.transport.write(request)
            return
        if self.connecting is not None:
            self.connecting.append(request)
            return
        self.connecting = [request]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        upstream = Upstream(self)
        await loop.create_connection(lambda: upstream, "127.0.0.1", self.upstream_port)
        self.upstream = upstream
        waiting, self.connecting = self.connecting or [], None
        assert upstream.transport is not None
        for request in waiting:
            upstream.transport.write(request)


async def main(pairs: list[tuple[int, int]], record: str | None, *, ahead: bool) -> None:
    recorder = Recorder(record, ahead=ahead) if record else None  # one database, as one router has one record
    loop = asyncio.get_running_loop()
    servers = []
    for port, upstream in pairs:
        servers.append(await loop.create_server(lambda up=upstream: Client(up, recorder), "127.0.0.1", port))
    await asyncio.gather(*(server.serve_forever() for server in servers))


def listen_pairs(args: list[str]) -> list[tuple[int, int]]:
    """Each PORT[:UPSTREAM]; a PORT alone relays to FLOOR_UPSTREAM_PORT."""
    pairs = []
    for arg in args:
        port, _, upstream = arg.partition(":")
        pairs.append((int(port), int(upstream or os.environ[UPSTREAM_PORT_ENV])))
    return pairs


if __name__ == "__main__":
    args = sys.argv[1:]
    db = None
    ahead = "--record-ahead" in args
    for flag in ("--record", "--record-ahead"):
        if flag in args:
            at = args.index(flag)
            db = args[at + 1]
            del args[at : at + 2]
    uvloop.run(main(listen_pairs(args), db, ahead=ahead))
