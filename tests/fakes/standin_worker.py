"""The stand-in worker: a stdlib-only Streamable-HTTP MCP server shaped like @playwright/mcp.

Run as ``python -S standin_worker.py PORT``: it starts in a few tens of milliseconds (no ``mcp``
import, which costs about a second of CPU per spawn). What it shares with the real worker, as far
as the router can tell:

- one "browser" per process, shared by every MCP session on it (``--shared-browser-context``),
  or with ``--isolated`` one per MCP session (its context, as Playwright's ``--isolated`` gives):
  tabs with URLs, and a ``clicks`` cookie that ``browser_click`` raises. Its text answers have
  Playwright's ``### `` sections (``Page``, ``Open tabs``, ``Snapshot`` with ``[ref=eN]``);
- ``browser_storage_state`` / ``browser_set_storage_state`` write and read that cookie as a
  Playwright storage-state file, so the router can save a session's browser and bring it back;
- a session whose client declared ``roots`` is asked ``roots/list`` on its GET stream at its
  first tool call (after waiting up to ``ROOTS_STREAM_WAIT`` for a stream), and that call waits
  for the answer; every answer says which roots the session got (``### Roots``) and how many GET
  streams it has had (``### Streams``);
- once a session has had a GET stream and a tool call, it is pinged there every
  ``STANDIN_PING_INTERVAL`` seconds (off when 0) and ended when a ping is not answered within
  ``STANDIN_PING_TIMEOUT`` seconds; one GET stream per session (a second gets 409);
- ``initialize`` and tool calls answer as SSE (chunked), everything else as JSON.

``browser_wait_for`` (``time`` seconds) is a slow call; ``echo`` answers its text.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

PING_INTERVAL = float(os.environ.get("STANDIN_PING_INTERVAL", "0"))
PING_TIMEOUT = float(os.environ.get("STANDIN_PING_TIMEOUT", "5"))
ROOTS_STREAM_WAIT = float(os.environ.get("STANDIN_ROOTS_STREAM_WAIT", "5"))
ROOTS_ANSWER_WAIT = float(os.environ.get("STANDIN_ROOTS_ANSWER_WAIT", "10"))
MAX_BODY = 8 * 1024 * 1024
COOKIE = "clicks"
BLANK = "about:blank"
TITLE = "Stand-in page"

READ_ONLY = {"browser_snapshot", "echo"}
TOOLS = [
    {
        "name": name,
        "inputSchema": {"type": "object", "properties": {arg: {"type": kind} for arg, kind in args.items()}},
        "annotations": {"readOnlyHint": name in READ_ONLY},
    }
    for name, args in {
        "browser_navigate": {"url": "string"},
        "browser_click": {"target": "string", "element": "string"},
        "browser_snapshot": {},
        "browser_tabs": {"action": "string", "index": "number", "url": "string"},
        "browser_wait_for": {"time": "number"},
        "browser_storage_state": {"filename": "string"},
        "browser_set_storage_state": {"filename": "string"},
        "echo": {"text": "string"},
    }.items()
]


class ToolError(Exception):
    pass


@dataclass
class Browser:
    tabs: list[str] = field(default_factory=lambda: [BLANK])
    current: int = 0
    clicks: int = 0

    def page(self) -> str:
        return f"### Page\n- Page URL: {self.tabs[self.current]}\n- Page Title: {TITLE}\n"

    def snapshot(self) -> str:
        return f'### Snapshot\n```yaml\n- generic [ref=e1]: clicks {self.clicks}\n- button "Bump" [ref=e2]\n```\n'

    def listing(self) -> str:
        lines = [
            f"- {i}: {'(current) ' if i == self.current else ''}[{TITLE}]({url})" for i, url in enumerate(self.tabs)
        ]
        return "### Open tabs\n" + "\n".join(lines) + "\n"

    def storage(self) -> dict[str, Any]:
        cookie = {"name": COOKIE, "value": str(self.clicks), "domain": "127.0.0.1", "path": "/", "expires": -1}
        return {"cookies": [cookie], "origins": []}

    def set_storage(self, state: dict[str, Any]) -> None:
        values = [c.get("value") for c in state.get("cookies", []) if isinstance(c, dict) and c.get("name") == COOKIE]
        self.clicks = int(values[0]) if values else 0

    def run(self, tool: str, args: dict[str, Any]) -> str:
        if tool == "browser_navigate":
            self.tabs[self.current] = str(args["url"])
            return self.page() + self.snapshot()
        if tool == "browser_click":
            self.clicks += 1
            return self.page() + self.snapshot()
        if tool in ("browser_snapshot", "browser_wait_for"):
            return self.page() + self.snapshot()
        if tool == "browser_tabs":
            return self._tabs(str(args.get("action", "list")), args)
        if tool == "browser_storage_state":
            # As the worker does, a named file's folder is made first.
            os.makedirs(os.path.dirname(os.path.abspath(str(args["filename"]))), exist_ok=True)
            with open(str(args["filename"]), "w") as f:
                json.dump(self.storage(), f)
            return "### Result\nSaved.\n"
        if tool == "browser_set_storage_state":
            with open(str(args["filename"])) as f:
                self.set_storage(json.load(f))
            return "### Result\nRestored.\n"
        if tool == "echo":
            return str(args.get("text", ""))
        raise ToolError(f"Tool {tool!r} not found")

    def _tabs(self, action: str, args: dict[str, Any]) -> str:
        if action == "new":
            self.tabs.append(str(args.get("url") or BLANK))
            self.current = len(self.tabs) - 1
        elif action in ("select", "close"):
            index = int(args.get("index", self.current))
            if not 0 <= index < len(self.tabs):
                raise ToolError(f"Tab {index} not found")
            if action == "select":
                self.current = index
            elif len(self.tabs) == 1:
                self.tabs = [BLANK]
            else:
                del self.tabs[index]
                self.current = min(self.current, len(self.tabs) - 1)
        return self.listing()


@dataclass
class McpSession:
    id: str
    wants_roots: bool
    ids: itertools.count[int] = field(default_factory=itertools.count)
    stream: asyncio.Queue[bytes | None] | None = None
    stream_changed: asyncio.Event = field(default_factory=asyncio.Event)
    pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    roots: str | None = None  # "none" once asked and not answered
    asked: asyncio.Lock = field(default_factory=asyncio.Lock)
    called: bool = False
    streams: int = 0  # GET streams this session has had
    pinging: asyncio.Task[None] | None = None
    browser: Browser | None = None  # its own, with --isolated


class Worker:
    def __init__(self, *, isolated: bool = False) -> None:
        self.browser = Browser()
        self.isolated = isolated
        self.sessions: dict[str, McpSession] = {}

    def browser_of(self, session: McpSession) -> Browser:
        if not self.isolated:
            return self.browser
        if session.browser is None:
            session.browser = Browser()
        return session.browser

    # -- the server-to-client requests, on the session's GET stream -----------------------------

    async def ask(self, session: McpSession, method: str, wait: float) -> Any:
        """A request on the session's stream, its answer's result; TimeoutError if none in ``wait``."""
        request_id = next(session.ids)
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        session.pending[request_id] = answer
        try:
            async with asyncio.timeout(wait):
                while session.stream is None:
                    session.stream_changed.clear()
                    await session.stream_changed.wait()
                session.stream.put_nowait(sse({"jsonrpc": "2.0", "id": request_id, "method": method}))
                return await answer
        finally:
            session.pending.pop(request_id, None)

    async def roots_of(self, session: McpSession) -> str:
        async with session.asked:
            if session.roots is None:
                try:
                    async with asyncio.timeout(ROOTS_STREAM_WAIT):
                        while session.stream is None:
                            session.stream_changed.clear()
                            await session.stream_changed.wait()
                except TimeoutError:
                    pass  # Playwright asks anyway, and waits for an answer that may come later
                try:
                    result = await self.ask(session, "roots/list", ROOTS_ANSWER_WAIT)
                    session.roots = ",".join(str(r.get("uri")) for r in result.get("roots", [])) or "none"
                except (TimeoutError, AttributeError):
                    session.roots = "none"
            return session.roots

    async def ping_loop(self, session: McpSession) -> None:
        while session.id in self.sessions:
            await asyncio.sleep(PING_INTERVAL)
            try:
                await self.ask(session, "ping", PING_TIMEOUT)
            except TimeoutError:
                self.end(session.id)  # as Playwright does: the client is gone
                return

    def start_pings(self, session: McpSession) -> None:
        if PING_INTERVAL > 0 and session.called and session.streams and session.pinging is None:
            session.pinging = asyncio.get_running_loop().create_task(self.ping_loop(session))

    def end(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        if session.stream is not None:
            session.stream.put_nowait(None)
        if session.pinging is not None and session.pinging is not asyncio.current_task():
            session.pinging.cancel()

    # -- requests -------------------------------------------------------------------------------

    async def post(self, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter) -> None:
        try:
            message = json.loads(body)
        except ValueError:
            return reply(writer, 400, error(None, -32700, "Parse error"))
        if not isinstance(message, dict):
            return reply(writer, 400, error(None, -32600, "Invalid Request"))
        method = message.get("method")
        if method == "initialize":
            params = message.get("params") or {}
            session = McpSession(uuid.uuid4().hex, "roots" in (params.get("capabilities") or {}))
            self.sessions[session.id] = session
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "standin-worker", "version": "1"},
            }
            return await reply_sse(writer, answer(message.get("id"), result), {"mcp-session-id": session.id})
        session = self.sessions.get(headers.get("mcp-session-id", ""))
        if session is None:
            return reply(writer, 404, error(message.get("id"), -32001, "Session not found"))
        if method is None:  # an answer to one of our requests
            waiting = session.pending.get(message.get("id"))  # type: ignore[arg-type]
            if waiting is not None and not waiting.done():
                waiting.set_result(message.get("result"))
            return reply(writer, 202, b"")
        if "id" not in message:
            return reply(writer, 202, b"")
        if method == "tools/list":
            return reply(writer, 200, answer(message["id"], {"tools": TOOLS}))
        if method == "ping":
            return reply(writer, 200, answer(message["id"], {}))
        if method != "tools/call":
            return reply(writer, 200, error(message["id"], -32601, "Method not found"))
        params = message.get("params") or {}
        tool, args = str(params.get("name")), params.get("arguments") or {}
        roots = await self.roots_of(session) if session.wants_roots else None
        session.called = True
        self.start_pings(session)
        if tool == "browser_wait_for":
            await asyncio.sleep(float(args.get("time", 0)))
        try:
            text = self.browser_of(session).run(tool, args)
        except (ToolError, KeyError, ValueError, OSError) as exc:
            result: dict[str, Any] = {"content": [{"type": "text", "text": f"### Error\n{exc}"}], "isError": True}
        else:
            if roots is not None:
                text += f"### Roots\n{roots}\n### Streams\n{session.streams}\n"
            result = {"content": [{"type": "text", "text": text}]}
        await reply_sse(writer, answer(message["id"], result))

    async def get(self, headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = self.sessions.get(headers.get("mcp-session-id", ""))
        if session is None:
            return reply(writer, 404, error(None, -32001, "Session not found"))
        if session.stream is not None:
            return reply(writer, 409, error(None, -32000, "Conflict: Only one SSE stream is allowed per session"))
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        session.stream = queue
        session.streams += 1
        session.stream_changed.set()
        self.start_pings(session)
        writer.write(head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}))
        gone = asyncio.get_running_loop().create_task(reader.read(1))  # the client hung up
        try:
            while True:
                got = asyncio.get_running_loop().create_task(queue.get())
                await asyncio.wait({got, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not got.done():
                    got.cancel()
                    break
                event = got.result()
                if event is None:
                    writer.write(b"0\r\n\r\n")
                    break
                writer.write(chunk(event))
                await writer.drain()
        finally:
            gone.cancel()
            if session.stream is queue:
                session.stream = None
                session.stream_changed.set()
        raise ConnectionResetError  # the connection is done with


def answer(request_id: Any, result: Any) -> bytes:
    # The SDKs' compact form, in their key order.
    return json.dumps({"result": result, "jsonrpc": "2.0", "id": request_id}, separators=(",", ":")).encode()


def error(request_id: Any, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(body, separators=(",", ":")).encode()


def sse(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message, separators=(",", ":")).encode() + b"\n\n"


def head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    headers = {"content-length": str(len(body))}
    if body:
        headers["content-type"] = "application/json"
    writer.write(head(status, headers) + body)


async def reply_sse(writer: asyncio.StreamWriter, message: bytes, extra: dict[str, str] | None = None) -> None:
    headers = {"content-type": "text/event-stream", "transfer-encoding": "chunked", **(extra or {})}
    writer.write(head(200, headers) + chunk(b"event: message\ndata: " + message + b"\n\n") + b"0\r\n\r\n")
    await writer.drain()


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await reader.readexactly(size + 2))[:-2]
            if len(body) > MAX_BODY:
                raise ValueError("body too large")
        await reader.readuntil(b"\r\n")
        return body
    length = int(headers.get("content-length", "0"))
    if length > MAX_BODY:
        raise ValueError("body too large")
    return await reader.readexactly(length)


async def serve(worker: Worker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method = lines[0].split(" ")[0]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            body = await read_body(reader, headers)
            if method == "POST":
                await worker.post(headers, body, writer)
            elif method == "GET":
                await worker.get(headers, reader, writer)
            elif method == "DELETE":
                worker.end(headers.get("mcp-session-id", ""))
                reply(writer, 200, b"")
            else:
                reply(writer, 405, b"")
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
        pass
    finally:
        with contextlib.suppress(ConnectionError):
            writer.close()


async def main(port: int, *, isolated: bool) -> None:
    worker = Worker(isolated=isolated)
    server = await asyncio.start_server(lambda r, w: serve(worker, r, w), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), isolated="--isolated" in sys.argv[2:]))
