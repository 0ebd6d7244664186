"""The client's requests and notifications on a session, with the stand-in worker: a request the
client cancelled before it reached a worker is never run; a second request under an id in flight
is refused; a notification the worker cannot take (it lost our MCP session) is still 202."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.http.exchange import CANCELLED_BEFORE_SENT, REQUEST_CANCELLED
from tests.support import RawClient, RouterThread, messages_of, router_settings, wait_for, wait_recorded
from tests.support.in_thread import cancelled_while_waiting, post_in_thread
from workers.orphans import processes_for

IDLE = 1.0  # the reap that makes the next call wait for a resume
SLOW_CALL = 1.0  # long enough for a second request to arrive while it runs


def call_body(id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def test_a_call_cancelled_while_it_waits_for_a_resume_is_not_run(state_dir: Path) -> None:
    settings = router_settings(state_dir, idle_timeout=IDLE, record=True)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        assert c.text("remember", key="k", value="before") == "ok"
        sid = c.session_id or ""
        session = router.manager.sessions.get(sid)
        wait_for(lambda: session.connection is None and not processes_for(state_dir, sid), timeout=10)

        answer = cancelled_while_waiting(c, session, call_body(555, "remember", key="k", value="cancelled-ran"))
        assert answer["error"]["code"] == REQUEST_CANCELLED
        # A new stand-in remembers nothing of the old one's; the call would have set the key.
        assert c.text("recall", key="k") == ""
        wait_recorded(router)
        with sqlite3.connect(state_dir / "router.db") as db:
            rows = db.execute(
                "SELECT r.status, r.error FROM requests q JOIN responses r USING (ref_id)"
                " WHERE q.params LIKE '%cancelled-ran%'"
            ).fetchall()
        assert rows == [("error", CANCELLED_BEFORE_SENT)]
        c.delete()


def test_a_cancel_for_an_unknown_or_malformed_id_changes_nothing(fake_router: RouterThread) -> None:
    with RawClient(fake_router.url) as c:
        c.initialize()
        for request_id in (12345, [1], None, True):
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
            assert c.post(cancel).status_code == 202
        assert c.text("echo", text="still") == "still"
        c.delete()


def test_a_second_request_under_an_id_in_flight_is_400_and_the_first_is_answered(
    fake_router: RouterThread,
) -> None:
    with RawClient(fake_router.url) as c:
        c.initialize()
        c.start_worker()
        sid = c.session_id or ""
        session = fake_router.manager.sessions.get(sid)
        thread, first = post_in_thread(fake_router.url, sid, call_body(7, "slow", seconds=SLOW_CALL))
        wait_for(lambda: 7 in session.requests, timeout=5)  # this one: an answered call may linger

        duplicate = c.post(call_body(7, "echo", text="second"))
        assert duplicate.status_code == 400
        error = duplicate.json()
        assert error["id"] == 7 and error["error"]["code"] == -32600
        assert "7" in error["error"]["message"] and error["error"]["data"] == {"id": 7}

        thread.join(30)
        assert first["status"] == 200
        assert [m["result"]["content"][0]["text"] for m in first["messages"] if m.get("id") == 7] == ["done"]
        # Once answered, the id is free again (the router keeps no history of ids).
        again = c.post(call_body(7, "echo", text="again"))
        assert again.status_code == 200 and messages_of(again)[-1]["result"]["content"][0]["text"] == "again"
        c.delete()


@pytest.mark.parametrize(
    "note",
    [
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "Esc"}},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
    ],
    ids=["cancelled", "roots-changed"],
)
def test_a_notification_the_worker_refuses_for_a_lost_session_is_202(
    fake_router: RouterThread, note: dict[str, Any]
) -> None:
    with RawClient(fake_router.url) as c:
        c.initialize()
        c.start_worker()
        session = fake_router.manager.sessions.get(c.session_id)
        connection = session.connection
        # The worker forgets the client's MCP session (what a missed ping does to @playwright/mcp).
        with httpx.Client(trust_env=False) as http:
            gone = http.delete(
                connection.url, headers={"host": connection.host_header, "mcp-session-id": session.worker_session_id}
            )
        assert gone.status_code == 200
        answer = c.post(note)
        assert answer.status_code == 202, answer.text
        assert answer.headers["mcp-session-id"] == c.session_id
        # The next request reopens a session on the same worker.
        assert c.text("echo", text="still here") == "still here"
        assert session.connection is connection
        c.delete()
