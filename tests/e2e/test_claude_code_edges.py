"""Edges of a Claude-Code-shaped conversation through the real @playwright/mcp worker: a
notification after the worker lost the client's MCP session, the worker sessions' requests under
ids never used twice, a call right after the worker ended the session, a large request header, two
requests under one id, a call cancelled before it reached the worker."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Final

import httpx
import pytest

from router.http.exchange import REQUEST_CANCELLED
from router.http.limits import MAX_HEAD_BYTES
from router.sessions.roots import ROUTER_ID_PREFIX
from router.sessions.serving import RELAY_WAIT
from router.sessions.table import Session
from tests.e2e.cc_steps import CALL_LIMIT, PINGS_WITHIN
from tests.e2e.claude_code import ClaudeCodeClient
from tests.integration.router.test_lost_worker_session import refused_as_lost
from tests.integration.router.test_worker_session_reopen import forget_worker_session
from tests.support import RawClient, RouterThread, messages_of, text_of, wait_for, wait_recorded
from tests.support.in_thread import cancelled_while_waiting, post_in_thread

CC_INITIALIZE: Final = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}},
    "clientInfo": {"name": "claude-code", "version": "2.1.328"},
}
LARGE_HEADER: Final = 20_000  # bytes: more than node takes by default (16 KiB)
WAIT_SECONDS: Final = 2  # browser_wait_for: long enough for a second request to arrive meanwhile


def cc_client(router: RouterThread) -> RawClient:
    client = RawClient(router.url)
    answer = client.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": CC_INITIALIZE})
    assert answer.status_code == 200, answer.text
    client.session_id = answer.headers["mcp-session-id"]
    assert client.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    return client


def session_of(router: RouterThread, client: RawClient) -> Session:
    session = router.manager.sessions.get(client.session_id or "")
    assert session is not None
    return session


def tool_call(id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def test_a_notification_after_the_worker_lost_the_session_is_202(pw_router: RouterThread) -> None:
    with cc_client(pw_router) as c:
        c.call("browser_tabs", action="list")
        session = session_of(pw_router, c)
        connection = session.connection
        assert connection is not None
        # The worker closes the client's MCP session, as it does when a ping goes unanswered
        # while the client's GET stream is away.
        forget_worker_session(session)
        for note in (
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99, "reason": "Esc"}},
        ):
            answer = c.post(note)
            assert answer.status_code == 202, answer.text  # a 404 makes a client start over, browser lost
        assert "result" in c.call("browser_tabs", action="list")  # through a reopened worker session
        assert session.connection is connection  # on the same worker
        c.delete()


def worker_requests(status: dict[str, Any]) -> list[tuple[str, Any]]:
    """(method, id) of each request the workers sent the client on its GET stream, in order."""
    return [
        (event["method"], event["id"])
        for event in status["events"]
        if event["kind"] == "server_request" and event["via"] == "get"
        and not str(event["id"]).startswith(ROUTER_ID_PREFIX)
    ]  # fmt: skip


def roots_asked(status: dict[str, Any]) -> int:
    return sum(1 for method, _ in worker_requests(status) if method == "roots/list")


def test_two_worker_sessions_ask_the_client_under_ids_never_used_twice(pw_router: RouterThread) -> None:
    """The worker forgot the client's MCP session and the router opened another there, which
    numbers its requests from 0 again: the client used to see its roots/list and pings under the
    first one's ids (the spec: never twice within a session)."""
    with ClaudeCodeClient(pw_router.url) as cc:
        cc.call("browser_tabs", action="list", timeout=CALL_LIMIT)
        cc.wait_status(lambda s: roots_asked(s) >= 1, timeout=PINGS_WITHIN, what="the worker session's roots/list")
        session = pw_router.manager.sessions.get(cc.session_id)
        assert session is not None
        forgotten = forget_worker_session(session)
        text, _ = cc.call("browser_tabs", action="list", timeout=CALL_LIMIT)
        assert "### Error" not in text, text
        assert session.worker_session_id != forgotten
        status = cc.wait_status(lambda s: roots_asked(s) >= 2, timeout=PINGS_WITHIN, what="the new one's roots/list")
        ids = [request_id for _, request_id in worker_requests(status)]
        assert len(ids) == len(set(ids)), worker_requests(status)


def test_the_call_after_the_worker_ended_the_session_is_not_held_for_the_relay(
    pw_router: RouterThread, caplog: pytest.LogCaptureFixture
) -> None:
    """Claude Code holds its GET stream; the worker ends the client's MCP session (as after a
    ping that went unanswered): the stream's next GET to the worker gets 404, and the next call
    goes to a new worker session at once instead of waiting RELAY_WAIT for a relay first."""
    with ClaudeCodeClient(pw_router.url) as cc:
        cc.call("browser_tabs", action="list", timeout=CALL_LIMIT)
        session = pw_router.manager.sessions.get(cc.session_id)
        assert session is not None
        with caplog.at_level(logging.DEBUG, logger="mcp_router.streams"):
            forget_worker_session(session)
            wait_for(lambda: refused_as_lost(cc.session_id) in caplog.text, timeout=PINGS_WITHIN)
            text, seconds = cc.call("browser_tabs", action="list", timeout=CALL_LIMIT)
        assert "### Error" not in text, text
        # Before, the call waited all of RELAY_WAIT before it was even sent; what it takes now is a
        # new worker session's first call (its roots/list across the client's stream, the attach
        # to the browser): ~0.1 s alone, up to ~1 s on a loaded 2-core machine.
        assert seconds < RELAY_WAIT, f"the call took {seconds:.2f} s"


def test_a_call_with_a_large_header_is_answered_and_recorded(pw_router: RouterThread) -> None:
    assert LARGE_HEADER < MAX_HEAD_BYTES
    with cc_client(pw_router) as c:
        answer = c.post(tool_call(5, "browser_tabs", action="list"), **{"x-large": "p" * LARGE_HEADER})
        assert answer.status_code == 200, answer.text
        assert "result" in messages_of(answer)[-1]
        wait_recorded(pw_router)
        with sqlite3.connect(pw_router.settings.state_dir / "router.db") as db:
            rows = db.execute(
                "SELECT r.status FROM requests q JOIN responses r USING (ref_id)"
                " WHERE q.session_id = ? AND q.tool = 'browser_tabs'",
                (c.session_id,),
            ).fetchall()
        assert rows == [("success",)]
        c.delete()


def test_a_get_stream_with_a_large_header_is_relayed(pw_router: RouterThread) -> None:
    # Refused by the worker, the stream was retried every second for ever, and each call waited
    # for a relay that never stood.
    with RawClient(pw_router.url) as c, httpx.Client(timeout=None, trust_env=False) as http:
        c.initialize()  # no roots: nobody answers on this stream
        stream_headers = c.headers(accept="text/event-stream", **{"x-large": "p" * LARGE_HEADER})
        with http.stream("GET", c.url, headers=stream_headers) as stream:
            assert stream.status_code == 200
            assert "result" in c.call("browser_tabs", action="list")
            session = session_of(pw_router, c)
            wait_for(session.relay_ready.is_set, timeout=10)
        c.delete()


def test_a_second_call_under_an_id_in_flight_is_400_and_the_first_is_answered(pw_router: RouterThread) -> None:
    with cc_client(pw_router) as c:
        c.call("browser_tabs", action="list")
        session = session_of(pw_router, c)
        thread, first = post_in_thread(pw_router.url, session.id, tool_call(7, "browser_wait_for", time=WAIT_SECONDS))
        # This one: the call before it may still be finishing (its log line, the browser watch).
        wait_for(lambda: 7 in session.requests, timeout=10)
        duplicate = c.post(tool_call(7, "browser_evaluate", function="() => 'second'"))
        assert duplicate.status_code == 400
        assert duplicate.json()["error"]["code"] == -32600 and duplicate.json()["id"] == 7
        thread.join(30)
        assert first["status"] == 200
        assert [m for m in first["messages"] if m.get("id") == 7 and "result" in m]
        c.delete()


def test_a_call_cancelled_before_it_reached_the_worker_is_not_run(pw_router: RouterThread, pages: str) -> None:
    with cc_client(pw_router) as c:
        # A new session's first call waits for its worker: node and Chromium start (no pool here).
        session = session_of(pw_router, c)
        answer = cancelled_while_waiting(c, session, tool_call(11, "browser_navigate", url=f"{pages}/second"))
        assert answer["error"]["code"] == REQUEST_CANCELLED
        assert f"{pages}/second" not in text_of(c.call("browser_tabs", action="list"))  # never navigated
        c.delete()
