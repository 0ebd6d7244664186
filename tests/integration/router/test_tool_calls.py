"""A tool call on a session whose worker is up, on the wire: its answer (whole, streamed when
slow or large, an error when the worker dies), its record, what reaches the worker, and a stop
or a client that goes while the worker is on it."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from router.http import endpoint
from router.http.exchange import Exchange
from router.record.schema import BUSY_TIMEOUT_MS
from router.upstream.client import HIGH_WATER
from router.upstream.pool import UpstreamPool
from tests.support import (
    RawClient,
    RouterThread,
    messages_of,
    raw_post,
    ref_of,
    router_settings,
    text_of,
    wait_recorded,
)
from tests.support.auth import TEST_TOKEN
from tests.support.scripted_worker import ScriptedWorker, http_answer
from tests.support.sse import iter_sse
from tests.support.wait import wait_for

GONE_TIMEOUT: Final = 20.0
SOCKET_TIMEOUT: Final = 20.0
# Another connection's hold on the record's write lock, well inside the router's busy timeout.
LOCK_HELD_S: Final = 0.5


@pytest.fixture(scope="module")
def router(rec_router: RouterThread) -> RouterThread:
    return rec_router


@pytest.fixture
def client(router: RouterThread) -> Iterator[RawClient]:
    with RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        yield c
        c.delete()


def response_row(router: RouterThread, ref: str) -> tuple[str, str]:
    with sqlite3.connect(Path(router.settings.state_dir) / "router.db") as db:
        row = db.execute("SELECT status, result FROM responses WHERE ref_id = ?", (ref,)).fetchone()
    assert row is not None, f"no response row for {ref}"
    return row[0], row[1]


def call_body(id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def test_a_tool_call_is_answered_and_recorded_alike(router: RouterThread, client: RawClient) -> None:
    answer = client.call("echo", text="hello")
    assert text_of(answer) == "hello"
    ref = ref_of(answer)
    wait_recorded(router)
    status, result = response_row(router, ref)
    assert status == "success" and json.loads(result)["content"][0]["text"] == "hello"


def test_a_tool_answer_leaves_only_once_its_call_is_committed(router: RouterThread, client: RawClient) -> None:
    """Another connection holds the record's write lock (a shell's short transaction): the answer
    waits until its rows are committed, so the row is there the moment the client has it."""
    db = Path(router.settings.state_dir) / "router.db"
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(LOCK_HELD_S, lambda: other.execute("ROLLBACK"))
    release.start()
    try:
        started = time.monotonic()
        answer = client.call("echo", text="held")
        took = time.monotonic() - started
        status, _ = response_row(router, ref_of(answer))  # no wait: on disk before it left
    finally:
        release.join()
        other.close()
    assert text_of(answer) == "held" and status == "success"
    assert LOCK_HELD_S * 0.9 < took < BUSY_TIMEOUT_MS / 1000, f"the answer took {took:.2f} s"


def test_a_tool_error_is_answered_and_recorded_as_an_error(router: RouterThread, client: RawClient) -> None:
    answer = client.call("no_such_tool")
    assert answer["result"]["isError"] is True
    wait_recorded(router)
    assert response_row(router, ref_of(answer))[0] == "error"


def test_a_note_before_the_answer_is_relayed_with_it(router: RouterThread, client: RawClient) -> None:
    # The worker writes a log message, then the answer: both are relayed, the answer with its ref.
    r = client.post(call_body(901, "log_then_answer"))
    note, answer = messages_of(r)
    assert note["method"] == "notifications/message"
    assert text_of(answer) == "answered" and ref_of(answer)


def test_a_slow_answer_is_streamed(router: RouterThread, client: RawClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # Past the wait for a whole answer (shortened here), the call is streamed: its progress notes
    # reach the client before its answer.
    monkeypatch.setattr(endpoint, "WHOLE_ANSWER_WAIT", 0.05)
    call = call_body(902, "slow", seconds=0.6)
    call["params"]["_meta"] = {"progressToken": "p902"}
    body = json.dumps(call)
    with client.http.stream("POST", client.url, content=body, headers=client.headers()) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        messages = list(iter_sse(r))
    assert messages[0]["method"] == "notifications/progress"
    assert text_of(messages[-1]) == "done"


def test_a_worker_that_dies_mid_call_gets_an_error_and_the_session_goes_on(
    router: RouterThread, client: RawClient
) -> None:
    r = client.post(call_body(903, "crash"))
    (error,) = messages_of(r)
    assert error["id"] == 903 and error["error"]["code"]
    assert client.text("echo", text="after") == "after"  # a resumed worker


def test_an_answer_past_what_is_held_unread_is_relayed_as_it_comes(
    router: RouterThread, client: RawClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past HIGH_WATER unread, the worker's socket pauses: the answer is relayed as it is read,
    # not awaited whole (it cannot come whole). The wait for a whole answer is made longer than
    # the client's patience: waiting for it would fail.
    monkeypatch.setattr(endpoint, "WHOLE_ANSWER_WAIT", 600.0)
    size = HIGH_WATER + 200_000
    assert len(client.text("big", size=size)) == size


def test_a_client_gone_mid_call_leaves_its_id_free_and_the_session_serving(
    router: RouterThread, client: RawClient
) -> None:
    assert client.session_id is not None
    session = router.manager.sessions.get(client.session_id)
    with socket.create_connection(("127.0.0.1", router.port), timeout=SOCKET_TIMEOUT) as sock:
        sock.sendall(raw_post(client, json.dumps(call_body(904, "slow", seconds=0.3)).encode()))
        wait_for(lambda: 904 in session.requests)
    wait_for(lambda: 904 not in session.requests)  # the call ran to its end, its answer dropped
    r = client.post(call_body(904, "echo", text="same id"))  # no longer in flight: not refused
    assert r.status_code == 200 and text_of(messages_of(r)[0]) == "same id"


@pytest.fixture
def own_router(state_dir: Path) -> Iterator[RouterThread]:
    with RouterThread(router_settings(state_dir, record=True)) as served:
        yield served


def test_a_bug_while_serving_a_call_is_a_json_rpc_500_and_the_session_goes_on(
    own_router: RouterThread, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An unexpected failure before the answer began ends the call with an error the client can
    # read (a JSON-RPC body with the request's id), is logged, and leaves the call's id free.
    with RawClient(own_router.url) as c:
        c.initialize()
        c.start_worker()

        def broken(exchange: Exchange) -> bool:
            raise RuntimeError("a bug")

        with monkeypatch.context() as patched:
            patched.setattr(Exchange, "needs_worker", broken)
            r = c.post(call_body(908, "echo", text="lost"))
        assert r.status_code == 500 and r.json()["id"] == 908 and r.json()["error"]["code"] == -32603
        assert "RuntimeError: a bug" in caplog.text
        again = c.post(call_body(908, "echo", text="again"))
        assert again.status_code == 200 and text_of(messages_of(again)[0]) == "again"


def test_credentials_never_reach_the_worker(own_router: RouterThread) -> None:
    with RawClient(own_router.url) as c:
        c.initialize()
        c.start_worker()
        connection = own_router.manager.sessions.get(c.session_id).connection

        def scripted(id: int) -> bytes:
            answer = {"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "scripted"}]}}
            event = b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n"
            return http_answer(200, event, {"content-type": "text/event-stream"})

        with ScriptedWorker(scripted(905)) as worker:
            connection.upstream = UpstreamPool("127.0.0.1", worker.port, "/mcp")
            r = c.post(call_body(905, "echo", text="x"), cookie="other=1")
            assert text_of(messages_of(r)[0]) == "scripted"
            sent = worker.requests[-1].lower()
            assert b"authorization" not in sent and TEST_TOKEN.lower().encode() not in sent
            assert b"cookie: other=1" in sent


def test_a_stop_waits_for_a_call_whose_client_went(state_dir: Path) -> None:
    # The client sent a call and went; the server is asked to stop while the worker is still
    # on it. uvicorn waits for its tasks (the call is one) before the lifespan ends the workers
    # and the record, so the call ends with its answer in the record, not cut by the shutdown.
    router = RouterThread(router_settings(state_dir, record=True))
    with router, RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        session = router.manager.sessions.get(c.session_id)
        with socket.create_connection(("127.0.0.1", router.port), timeout=SOCKET_TIMEOUT) as sock:
            sock.sendall(raw_post(c, json.dumps(call_body(909, "slow", seconds=0.5)).encode()))
            wait_for(lambda: 909 in session.requests)
        router.manager.request_stop()
        router.server.should_exit = True
        router.thread.join(timeout=GONE_TIMEOUT)
        assert not router.thread.is_alive()
    with sqlite3.connect(state_dir / "router.db") as db:
        rows = db.execute(
            "SELECT s.status, s.result FROM requests q JOIN responses s USING (ref_id) WHERE q.tool = 'slow'"
        ).fetchall()
    assert len(rows) == 1 and rows[0][0] == "success" and "done" in rows[0][1], rows


def test_a_call_still_waited_for_at_the_graceful_timeout_is_cut(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait for a whole answer made longer than the server's graceful timeout: at that
    # timeout uvicorn cancels its tasks (the call is one), before the lifespan ends the workers:
    # the client gets a 500, and the call's id is no longer in flight.
    monkeypatch.setattr(endpoint, "WHOLE_ANSWER_WAIT", 600.0)
    router = RouterThread(router_settings(state_dir, record=True))
    router.server.config.timeout_graceful_shutdown = 0.5
    with router, RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        with socket.create_connection(("127.0.0.1", router.port), timeout=SOCKET_TIMEOUT) as sock:
            sock.sendall(raw_post(c, json.dumps(call_body(910, "slow", seconds=30)).encode()))
            session = router.manager.sessions.get(c.session_id)
            wait_for(lambda: 910 in session.requests)
            router.server.should_exit = True
            answer = sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 500 "), answer
            assert 910 not in session.requests
        router.thread.join(timeout=GONE_TIMEOUT)
        assert not router.thread.is_alive()
