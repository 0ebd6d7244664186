"""Proxy edge cases at the socket: a scripted worker answers with the bytes each test writes, so
the router's own HTTP client to its workers meets odd framing, hang-ups and bad HTTP."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from router.http import endpoint
from router.http.app import build_supervisor
from router.http.limits import MAX_HEAD_BYTES
from router.http.streaming import NO_ANSWER
from router.upstream.pool import UpstreamPool
from tests.support import RawClient, RouterThread, messages_of, router_settings, spare_port, wait_recorded
from tests.support.scripted_worker import CLOSE, READ_TIMEOUT, InParts, ScriptedWorker, ThenClose, http_answer
from tests.support.sse import iter_sse
from workers.spec import NODE_HEADER_SIZE_FLAG

TOOLS = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}).encode()
JSON_HEADERS = {"content-type": "application/json"}
LARGE_HEADER = 20_000  # bytes: more than node takes by default (16 KiB)


@dataclass
class Edge:
    router: RouterThread
    client: RawClient
    worker: ScriptedWorker


@pytest.fixture
def edge(state_dir: Path) -> Iterator[Edge]:
    with edge_router(state_dir) as edge:
        yield edge


@contextmanager
def edge_router(state_dir: Path, *, record: bool = False) -> Iterator[Edge]:
    with RouterThread(router_settings(state_dir, record=record)) as router, RawClient(router.url) as client:
        client.initialize()
        client.start_worker()
        connection = router.manager.sessions.get(client.session_id).connection
        with ScriptedWorker(http_answer(200, TOOLS, JSON_HEADERS)) as worker:
            # The session's client traffic now goes to the scripted worker; the router's own
            # sessions (handshake replays) still reach the real stand-in worker.
            connection.upstream = UpstreamPool("127.0.0.1", worker.port, "/mcp")
            yield Edge(router, client, worker)
        client.delete()


def tools_list(client: RawClient, id: int) -> tuple[int, dict[str, object]]:
    r = client.post({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
    return r.status_code, messages_of(r)[-1]


def test_worker_5xx_becomes_502_with_jsonrpc_error(edge: Edge) -> None:
    edge.worker.answers.append(http_answer(500, b"<html>boom</html>", {"content-type": "text/html"}))
    status, body = tools_list(edge.client, 31)
    assert status == 502
    assert body["id"] == 31 and body["error"]["data"]["worker_status"] == 500  # type: ignore[index]


def test_worker_losing_the_session_is_not_a_client_404(edge: Edge) -> None:
    gone = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "gone"}}).encode()
    edge.worker.default = http_answer(404, gone, JSON_HEADERS)
    status, _ = tools_list(edge.client, 32)
    assert status == 502


def test_worker_hop_by_hop_and_length_headers_are_not_forwarded(edge: Edge) -> None:
    headers = {
        **JSON_HEADERS,
        "connection": "close",
        "keep-alive": "timeout=1",
        "x-worker": "yes",
        "mcp-session-id": "worker-internal-id",
    }
    edge.worker.answers.append(http_answer(200, TOOLS.replace(b'"id": 1', b'"id": 33'), headers))
    r = edge.client.post({"jsonrpc": "2.0", "id": 33, "method": "tools/list"})
    assert r.status_code == 200
    assert r.headers["x-worker"] == "yes"
    assert r.headers["mcp-session-id"] == edge.client.session_id
    assert "keep-alive" not in r.headers
    # The router appended its own tools, so the length differs from the worker's: no stale header.
    assert len(r.json()["result"]["tools"]) == 3
    assert int(r.headers.get("content-length", len(r.content))) == len(r.content)


def test_kept_alive_socket_is_reused_and_connection_close_is_honoured(edge: Edge) -> None:
    for id in (41, 42, 43):
        assert tools_list(edge.client, id)[0] == 200
    assert edge.worker.connections == 1
    edge.worker.answers.append(http_answer(200, TOOLS, {**JSON_HEADERS, "connection": "close"}))
    assert tools_list(edge.client, 44)[0] == 200
    assert tools_list(edge.client, 45)[0] == 200  # a new socket, after the worker closed the old one
    assert edge.worker.connections == 2


def test_chunked_sse_answer_is_relayed_with_its_ref(edge: Edge) -> None:
    answer = {"jsonrpc": "2.0", "id": 51, "result": {"content": [{"type": "text", "text": "hi"}]}}
    event = b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n"
    edge.worker.answers.append(http_answer(200, event, {"content-type": "text/event-stream"}, chunked=True))
    r = edge.client.post({"jsonrpc": "2.0", "id": 51, "method": "tools/call", "params": {"name": "browser_tabs"}})
    assert r.status_code == 200
    (message,) = messages_of(r)
    assert message["result"]["content"][0]["text"] == "hi"
    assert message["result"]["_meta"]["mcp-router/refId"]


def sse_head_then_event(
    id: int, text: str, gap: float, *, note: bytes = b"", release: threading.Event | None = None
) -> InParts:
    """A worker's answer as it writes one: the head while the tool runs, the event when done."""
    answer = {"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}}
    event = b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    chunk = f"{len(event):x}\r\n".encode() + event + b"\r\n0\r\n\r\n"
    if note:
        return InParts(head, f"{len(note):x}\r\n".encode() + note + b"\r\n", chunk, gap=gap, release=release)
    return InParts(head, chunk, gap=gap, release=release)


def test_answer_whose_event_follows_its_head_is_relayed_whole(edge: Edge) -> None:
    edge.worker.answers.append(sse_head_then_event(52, "later", 0.1))
    r = edge.client.post({"jsonrpc": "2.0", "id": 52, "method": "tools/call", "params": {"name": "browser_tabs"}})
    assert r.status_code == 200
    (message,) = messages_of(r)
    assert message["result"]["content"][0]["text"] == "later"


def test_slow_answer_is_streamed_and_what_comes_first_is_not_held(
    edge: Edge, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the wait for a whole answer, the stream starts; an event before the answer (here a
    # notification) reaches the client at once, not with the answer.
    monkeypatch.setattr(endpoint, "WHOLE_ANSWER_WAIT", 0.05)
    note = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n'
    # The worker holds its answer back until the note has reached the client: no timing involved.
    release = threading.Event()
    worker_answer = sse_head_then_event(53, "slow", 0.0, note=note, release=release)
    edge.worker.answers.append(worker_answer)
    body = json.dumps({"jsonrpc": "2.0", "id": 53, "method": "tools/call", "params": {"name": "browser_tabs"}})
    with edge.client.http.stream("POST", edge.client.url, content=body, headers=edge.client.headers()) as r:
        events = iter_sse(r)
        first = next(events)
        answer_written = worker_answer.sent.is_set()
        release.set()
        answer = next(events)
    assert first["method"] == "notifications/message"
    assert not answer_written, "the note was held until the worker's answer"
    assert answer["result"]["content"][0]["text"] == "slow"


def call_rows(edge: Edge) -> list[tuple[str, str]]:
    """(status, error) of the record's browser_tabs calls, once the record is flushed."""
    wait_recorded(edge.router)
    with sqlite3.connect(edge.router.settings.state_dir / "router.db") as conn:
        return conn.execute(
            "SELECT r.status, r.error FROM requests q JOIN responses r USING (ref_id) WHERE q.tool = 'browser_tabs'"
        ).fetchall()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_answer_stream_ending_without_the_answer_gets_an_error(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    # The worker's stream for a call ends with no event answering it: the client is told so,
    # in the same stream, and the call is in the record as failed before it is told.
    monkeypatch.setattr(endpoint, "WHOLE_ANSWER_WAIT", 0.05)
    note = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n'
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    chunk = f"{len(note):x}\r\n".encode() + note + b"\r\n0\r\n\r\n"
    with edge_router(state_dir, record=True) as edge:
        edge.worker.answers.append(InParts(head, chunk, gap=0.3 if streamed else 0.0))
        body = {"jsonrpc": "2.0", "id": 55, "method": "tools/call", "params": {"name": "browser_tabs"}}
        r = edge.client.post(body)
        assert r.status_code == 200
        first, last = messages_of(r)
        assert first["method"] == "notifications/message"
        assert last["id"] == 55 and "without an answer" in last["error"]["message"]
        assert call_rows(edge) == [("error", NO_ANSWER)]


def test_a_failed_call_is_in_the_record_before_its_error_reaches_the_client(state_dir: Path) -> None:
    with edge_router(state_dir, record=True) as edge:
        edge.worker.answers.append(http_answer(500, b"boom", {"content-type": "text/plain"}))
        r = edge.client.post({"jsonrpc": "2.0", "id": 56, "method": "tools/call", "params": {"name": "browser_tabs"}})
        assert r.status_code == 502
        assert call_rows(edge) == [("error", "worker answered HTTP 500")]


@pytest.mark.parametrize(
    "answer",
    [
        CLOSE,
        ThenClose(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"partial"),
        ThenClose(b"this is not HTTP\r\n\r\n"),
    ],
    ids=["hang-up", "short-body", "garbage"],
)
def test_worker_breaking_mid_answer_is_502_with_jsonrpc_error(edge: Edge, answer: bytes) -> None:
    edge.worker.answers.append(answer)
    status, body = tools_list(edge.client, 61)
    assert status == 502
    assert body["id"] == 61 and body["error"]["code"] == -32603  # type: ignore[index]


def test_worker_refusing_connections_gets_a_resumed_worker(edge: Edge) -> None:
    session = edge.router.manager.sessions.get(edge.client.session_id)
    before = session.connection
    before.upstream = UpstreamPool("127.0.0.1", spare_port(), "/mcp")  # nobody listens there
    status, body = tools_list(edge.client, 34)
    assert status == 200 and body["id"] == 34
    assert session.connection is not before  # nothing was delivered, so a new worker took it


async def test_the_request_is_handed_on_before_the_worker_answers() -> None:
    # `sent` (where an exchange enqueues its request's row) runs once the request is written and
    # before the worker's answer: the worker here writes nothing until `sent` has run.
    release = threading.Event()
    answer = InParts(b"", http_answer(200, TOOLS, JSON_HEADERS), gap=0.0, release=release)
    written_before_sent: list[bool] = []

    def sent() -> None:
        written_before_sent.append(answer.sent.is_set())
        release.set()

    with ScriptedWorker(answer) as worker:
        pool = UpstreamPool("127.0.0.1", worker.port, "/mcp")
        try:
            response = await pool.request("POST", [(b"host", b"x")], b"{}", sent=sent)
            assert json.loads(await response.aread()) == json.loads(TOOLS)
            await response.aclose()
        finally:
            await pool.aclose()
    assert written_before_sent == [False]
    assert len(worker.requests) == 1



async def test_an_answer_is_waited_for_once_however_many_look() -> None:
    # The proxy settles a tool call's answer to look for a crashed page, then again to relay it:
    # a slow answer's stream must not start a second wait later.
    release = threading.Event()
    with ScriptedWorker(sse_head_then_event(1, "slow", 0.0, release=release)) as worker:
        pool = UpstreamPool("127.0.0.1", worker.port, "/mcp")
        try:
            response = await pool.request("POST", [(b"host", b"x")], b"{}")
            await response.settle(0.05)  # nothing of the body yet: it waits its time
            assert not response.complete
            await asyncio.wait_for(response.settle(READ_TIMEOUT), timeout=READ_TIMEOUT / 2)
        finally:
            release.set()
            await pool.aclose()


def test_a_worker_hanging_up_after_its_refusal_is_502_and_in_the_record(state_dir: Path) -> None:
    # What node does with a head larger than it takes: 431, "connection: close", no framing.
    with edge_router(state_dir, record=True) as edge:
        edge.worker.answers.append(ThenClose(b"HTTP/1.1 431 Too Large\r\nconnection: close\r\n\r\n"))
        r = edge.client.post({"jsonrpc": "2.0", "id": 57, "method": "tools/call", "params": {"name": "browser_tabs"}})
        assert r.status_code == 502
        ((status, error),) = call_rows(edge)
        assert status == "error" and "closed the connection" in error


def test_a_worker_refusal_passed_on_is_in_the_record(state_dir: Path) -> None:
    refusal = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "no"}}).encode()
    with edge_router(state_dir, record=True) as edge:
        edge.worker.answers.append(http_answer(400, refusal, JSON_HEADERS))
        r = edge.client.post({"jsonrpc": "2.0", "id": 58, "method": "tools/call", "params": {"name": "browser_tabs"}})
        assert r.status_code == 400 and r.content == refusal
        assert call_rows(edge) == [("error", f"worker answered HTTP 400: {refusal.decode()}")]


def test_a_large_header_reaches_the_worker_and_the_call_is_recorded(state_dir: Path) -> None:
    # Past node's default 16 KiB, within the router's head limit (the real worker's own limit:
    # tests/e2e/test_claude_code_edges.py).
    with RouterThread(router_settings(state_dir, record=True)) as router, RawClient(router.url) as client:
        client.initialize()
        params = {"name": "echo", "arguments": {"text": "x"}}
        echo = {"jsonrpc": "2.0", "id": 59, "method": "tools/call", "params": params}
        r = client.post(echo, **{"x-large": "p" * LARGE_HEADER})
        assert r.status_code == 200 and messages_of(r)[-1]["result"]["content"][0]["text"] == "x"
        wait_recorded(router)
        with sqlite3.connect(state_dir / "router.db") as conn:
            calls = "SELECT r.status FROM requests q JOIN responses r USING (ref_id) WHERE q.tool = 'echo'"
            assert conn.execute(calls).fetchall() == [("success",)]
        client.delete()


def test_workers_take_every_head_the_router_takes(state_dir: Path) -> None:
    argv = build_supervisor(router_settings(state_dir, worker_command=None)).spec.argv_template
    (flag,) = [a for a in argv if a.startswith(NODE_HEADER_SIZE_FLAG + "=")]
    assert int(flag.split("=", 1)[1]) >= MAX_HEAD_BYTES
    assert argv.index(flag) < argv.index("{cli}")  # node's option, not the worker's
