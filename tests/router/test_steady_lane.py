"""The steady lane (router/http/steady.py): a tool call on a session whose worker is up, served in
the server's callbacks. Each wire test runs against a router with the lane and one without it
(``--no-steady-lane``): a client must not be able to tell them apart (parity), only the lane's
counters may. The lane's own cases (what it hands over, what it waits for) follow."""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from router.http import endpoint
from router.http.exchange import Exchange
from router.http.steady import SteadyLane
from router.http.upstream import HIGH_WATER
from router.http.upstream_pool import UpstreamPool
from router.record.recorder import Recorder
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
from workers.orphans import processes_for

GONE_TIMEOUT: Final = 20.0
SOCKET_TIMEOUT: Final = 20.0


@pytest.fixture(scope="module", params=[True, False], ids=["steady", "chain"])
def router(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("steady" if request.param else "chain")
    with RouterThread(router_settings(state, steady_lane=request.param, record=True)) as served:
        yield served
    wait_for(lambda: not processes_for(state), timeout=GONE_TIMEOUT)


@pytest.fixture
def client(router: RouterThread) -> Iterator[RawClient]:
    with RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        yield c
        c.delete()


def lane_of(router: RouterThread) -> SteadyLane | None:
    steady: SteadyLane | None = router.app.state.direct_lane.steady
    return steady


def counts(router: RouterThread) -> tuple[int, int]:
    """(served, handed over) by the steady lane; (0, 0) without it."""
    steady = lane_of(router)
    return (0, 0) if steady is None else (steady.served, steady.handed_over)


def expect(router: RouterThread, before: tuple[int, int], served: int, handed_over: int) -> None:
    if lane_of(router) is None:
        assert counts(router) == (0, 0)
    else:
        assert counts(router) == (before[0] + served, before[1] + handed_over)


def response_row(router: RouterThread, ref: str) -> tuple[str, str]:
    with sqlite3.connect(Path(router.settings.state_dir) / "router.db") as db:
        row = db.execute("SELECT status, result FROM responses WHERE ref_id = ?", (ref,)).fetchone()
    assert row is not None, f"no response row for {ref}"
    return row[0], row[1]


def call_body(id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


# -- parity: either way, the same answers and the same record ------------------------------------


def test_a_tool_call_is_answered_and_recorded_alike(router: RouterThread, client: RawClient) -> None:
    before = counts(router)
    answer = client.call("echo", text="hello")
    assert text_of(answer) == "hello"
    ref = ref_of(answer)
    expect(router, before, served=1, handed_over=0)
    wait_recorded(router.settings.state_dir)
    status, result = response_row(router, ref)
    assert status == "success" and json.loads(result)["content"][0]["text"] == "hello"


def test_a_tool_error_is_answered_and_recorded_as_an_error(router: RouterThread, client: RawClient) -> None:
    before = counts(router)
    answer = client.call("no_such_tool")
    assert answer["result"]["isError"] is True
    expect(router, before, served=1, handed_over=0)
    wait_recorded(router.settings.state_dir)
    assert response_row(router, ref_of(answer))[0] == "error"


def test_what_the_lane_does_not_take_is_the_chains(router: RouterThread, client: RawClient) -> None:
    before = counts(router)
    listed = client.request("tools/list")  # not a tool call
    assert any(tool["name"] == "echo" for tool in listed["result"]["tools"])
    body = call_body(900, "echo", text="x")
    assert client.post(body, authorization="Bearer wrong").status_code == 401
    assert client.post(body, origin="http://evil.example").status_code == 403
    refused = client.post(body, **{"mcp-protocol-version": "1999-01-01"})
    assert refused.status_code == 400 and refused.json()["error"]["code"]
    expect(router, before, served=0, handed_over=0)


def test_a_note_before_the_answer_is_relayed_with_it(router: RouterThread, client: RawClient) -> None:
    # The worker writes a log message, then the answer: not one plain event, so the lane hands it
    # over and the chain relays both.
    before = counts(router)
    r = client.post(call_body(901, "log_then_answer"))
    note, answer = messages_of(r)
    assert note["method"] == "notifications/message"
    assert text_of(answer) == "answered" and ref_of(answer)
    expect(router, before, served=1, handed_over=1)


def test_a_slow_answer_is_streamed(router: RouterThread, client: RawClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # Past the wait for a whole answer (shortened here), the lane hands the call over and the
    # chain streams it: its progress notes reach the client before its answer.
    monkeypatch.setattr(endpoint, "WHOLE_ANSWER_WAIT", 0.05)
    before = counts(router)
    call = call_body(902, "slow", seconds=0.6)
    call["params"]["_meta"] = {"progressToken": "p902"}
    body = json.dumps(call)
    with client.http.stream("POST", client.url, content=body, headers=client.headers()) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        messages = list(iter_sse(r))
    assert messages[0]["method"] == "notifications/progress"
    assert text_of(messages[-1]) == "done"
    expect(router, before, served=1, handed_over=1)


def test_a_worker_that_dies_mid_call_gets_an_error_and_the_session_goes_on(
    router: RouterThread, client: RawClient
) -> None:
    before = counts(router)
    r = client.post(call_body(903, "crash"))
    (error,) = messages_of(r)
    assert error["id"] == 903 and error["error"]["code"]
    assert client.text("echo", text="after") == "after"  # a resumed worker (the chain's: it spawns)
    expect(router, before, served=1, handed_over=1)


def test_an_answer_past_what_is_held_unread_is_relayed_as_it_comes(
    router: RouterThread, client: RawClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past HIGH_WATER unread, the worker's socket pauses: the lane must hand the call over then
    # (the chain relays it as it reads), not wait for a whole answer that cannot come. The wait
    # for a whole answer is made longer than the client's patience: waiting for it would fail.
    monkeypatch.setattr(endpoint, "WHOLE_ANSWER_WAIT", 600.0)
    before = counts(router)
    size = HIGH_WATER + 200_000
    assert len(client.text("big", size=size)) == size
    expect(router, before, served=1, handed_over=1)


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


# -- the lane's own cases -------------------------------------------------------------------------


@pytest.fixture
def steady_router(state_dir: Path) -> Iterator[RouterThread]:
    with RouterThread(router_settings(state_dir, record=True)) as served:
        yield served


def test_an_answer_waits_for_its_row_when_the_write_ahead_file_cannot_take_it(
    steady_router: RouterThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The answer then leaves only once its row is committed: read back at once, it is there.
    with RawClient(steady_router.url) as c:
        c.initialize()
        c.start_worker()
        monkeypatch.setattr(Recorder, "ahead_now", lambda self: False)
        before = counts(steady_router)
        answer = c.call("echo", text="durable")
        assert response_row(steady_router, ref_of(answer))[0] == "success"
        expect(steady_router, before, served=1, handed_over=1)


def test_a_failure_on_the_lanes_own_path_is_a_json_rpc_500_and_the_session_goes_on(
    steady_router: RouterThread, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A bug in the lane's callbacks must end the call as the chain ends one that raised: an
    # error with the request's id, the call in the record, its id free again.
    with RawClient(steady_router.url) as c:
        c.initialize()
        c.start_worker()
        take_answer = Exchange.take_answer

        def broken(exchange: Exchange, payload: bytes) -> bytes | None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(Exchange, "take_answer", broken)
        r = c.post(call_body(908, "echo", text="lost"))
        assert r.status_code == 500 and r.json()["id"] == 908 and r.json()["error"]["code"] == -32603
        assert "steady lane: a call failed" in caplog.text
        monkeypatch.setattr(Exchange, "take_answer", take_answer)
        again = c.post(call_body(908, "echo", text="again"))
        assert again.status_code == 200 and text_of(messages_of(again)[0]) == "again"
        wait_recorded(steady_router.settings.state_dir)
        with sqlite3.connect(Path(steady_router.settings.state_dir) / "router.db") as db:
            errors = db.execute("SELECT error FROM responses WHERE status = 'error'").fetchall()
        assert ("internal error on the router's steady lane",) in errors


def test_credentials_never_reach_the_worker(steady_router: RouterThread) -> None:
    with RawClient(steady_router.url) as c:
        c.initialize()
        c.start_worker()
        connection = steady_router.manager.sessions.get(c.session_id).connection

        def scripted(id: int) -> bytes:
            answer = {"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "scripted"}]}}
            event = b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n"
            return http_answer(200, event, {"content-type": "text/event-stream"})

        with ScriptedWorker(scripted(905)) as worker:
            connection.upstream = UpstreamPool("127.0.0.1", worker.port, "/mcp")
            worker.answers.append(scripted(904))
            # The lane takes idle kept-alive connections only: this call's opens one.
            assert text_of(messages_of(c.post(call_body(904, "echo", text="opening")))[0]) == "scripted"
            before = counts(steady_router)
            r = c.post(call_body(905, "echo", text="x"), cookie="other=1")
            assert text_of(messages_of(r)[0]) == "scripted"
            expect(steady_router, before, served=1, handed_over=0)
            sent = worker.requests[-1].lower()
            assert b"authorization" not in sent and TEST_TOKEN.lower().encode() not in sent
            assert b"cookie: other=1" in sent


def test_a_call_pipelined_behind_a_steady_one_waits_its_turn(steady_router: RouterThread) -> None:
    # The lane's call stands as the connection's cycle: what comes behind it is queued, in order.
    with RawClient(steady_router.url) as c:
        c.initialize()
        c.start_worker()
        with socket.create_connection(("127.0.0.1", steady_router.port), timeout=SOCKET_TIMEOUT) as sock:
            first = json.dumps(call_body(906, "slow", seconds=0.2)).encode()
            second = json.dumps(call_body(907, "echo", text="second")).encode()
            sock.sendall(raw_post(c, first) + raw_post(c, second))
            data = b""
            while data.count(b'"id":90') < 2:
                chunk = sock.recv(65536)
                assert chunk, data
                data += chunk
        assert data.index(b'"id":906') < data.index(b'"id":907')
        assert b'"text":"second"' in data


@pytest.mark.parametrize("steady", [True, False], ids=["steady", "chain"])
def test_a_stop_waits_for_a_call_whose_client_went(state_dir: Path, steady: bool) -> None:
    # The client sent a call and went; the server is asked to stop while the worker is still
    # on it. uvicorn waits for its tasks (the chain's call is one) before the lifespan ends the
    # workers and the record: the steady lane's call, served in callbacks, must be waited for
    # alike, so it ends with its answer in the record, not cut by the shutdown.
    router = RouterThread(router_settings(state_dir, record=True, steady_lane=steady))
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


@pytest.mark.parametrize("steady", [True, False], ids=["steady", "chain"])
def test_a_call_still_in_callbacks_at_the_graceful_timeout_is_cut_as_a_task_is(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, steady: bool
) -> None:
    # The wait for a whole answer made longer than the server's graceful timeout: at that
    # timeout uvicorn cancels its tasks (the chain's call is one), and the call the lane holds is
    # cut with them, before the lifespan ends the workers (else the worker's end would hand it to
    # the chain then, which would answer it during the shutdown).
    monkeypatch.setattr(endpoint, "WHOLE_ANSWER_WAIT", 600.0)
    router = RouterThread(router_settings(state_dir, record=True, steady_lane=steady))
    router.server.config.timeout_graceful_shutdown = 0.5
    with router, RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        before = counts(router)
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
        expect(router, before, served=1, handed_over=0)
