"""Streams both ways: progress on a call's SSE answer, server→client requests, the GET stream."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.support import RawClient, RouterThread, auth_headers, iter_sse, messages_of, router_settings, wait_for


def test_progress_and_answer_stream_through(fake_router: RouterThread) -> None:
    with RawClient(fake_router.url) as c:
        c.initialize()
        body = {
            "jsonrpc": "2.0",
            "id": 11,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 0.4}, "_meta": {"progressToken": "p1"}},
        }
        seen: list[dict[str, Any]] = []
        with c.http.stream("POST", c.url, content=json.dumps(body), headers=c.headers()) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-cache, no-transform"
            assert r.headers["x-accel-buffering"] == "no"
            assert "content-length" not in r.headers
            assert "content-encoding" not in r.headers
            seen.extend(m for m in iter_sse(r) if "comment" not in m)
        progress = [m for m in seen if m.get("method") == "notifications/progress"]
        assert len(progress) >= 3
        assert seen[-1]["id"] == 11 and seen[-1]["result"]["content"][0]["text"] == "done"
        c.delete()


def test_server_to_client_request_crosses_and_answer_returns(fake_router: RouterThread) -> None:
    """The worker asks roots/list (on the GET stream) mid-call; the client's answer crosses back."""
    with RawClient(fake_router.url) as c:
        c.initialize()
        answered = threading.Event()
        opened = threading.Event()

        def answer_roots() -> None:
            headers = {"accept": "text/event-stream", "mcp-session-id": c.session_id or "", **auth_headers()}
            with httpx.Client(timeout=30) as http, http.stream("GET", c.url, headers=headers) as r:
                opened.set()
                for message in iter_sse(r):
                    if message.get("method") == "roots/list":
                        answer = {
                            "jsonrpc": "2.0",
                            "id": message["id"],
                            "result": {"roots": [{"uri": "file:///tmp/project", "name": "p"}]},
                        }
                        with RawClient(fake_router.url) as other:
                            other.session_id = c.session_id
                            assert other.post(answer).status_code == 202
                        answered.set()
                        return

        reader = threading.Thread(target=answer_roots, daemon=True)
        reader.start()
        assert opened.wait(10)
        assert c.text("roots") == "file:///tmp/project"
        reader.join(timeout=10)
        assert answered.is_set()
        c.delete()


def test_get_stream_sends_keepalives_and_closes_upstream_when_client_goes(state_dir: Path) -> None:
    settings = router_settings(state_dir, keepalive_interval=0.2)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        headers = {"accept": "text/event-stream", "mcp-session-id": c.session_id or "", **auth_headers()}
        comments = 0
        with c.http.stream("GET", c.url, headers=headers) as r:
            assert r.status_code == 200
            assert r.headers["x-accel-buffering"] == "no"
            for message in iter_sse(r):
                if "comment" in message:
                    comments += 1
                if comments >= 2:
                    break
        assert comments >= 2
        session = router.manager.sessions.get(c.session_id)
        connection = session.connection
        # The upstream GET is released once the client has gone, so the pool has no active stream.
        wait_for(lambda: connection.upstream.busy == 0, timeout=5)
        assert c.delete().status_code == 200


def test_a_calls_notification_comes_on_its_own_stream_not_the_open_get_stream(fake_router: RouterThread) -> None:
    """A log the worker sends while answering a call belongs to that call's SSE answer; an open GET
    stream must neither take it nor get a copy."""
    with RawClient(fake_router.url) as c:
        c.initialize()
        headers = {"accept": "text/event-stream", "mcp-session-id": c.session_id or "", **auth_headers()}
        on_get: list[dict[str, Any]] = []
        opened = threading.Event()

        def hold_get_stream() -> None:
            with httpx.Client(timeout=30) as http, http.stream("GET", c.url, headers=headers) as r:
                assert r.status_code == 200
                opened.set()
                on_get.extend(m for m in iter_sse(r) if "comment" not in m)

        reader = threading.Thread(target=hold_get_stream, daemon=True)
        reader.start()
        assert opened.wait(10)
        call = {"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "log_then_answer"}}
        answer = c.post(call)
        assert answer.headers["content-type"].startswith("text/event-stream")
        messages = messages_of(answer)
        assert [m.get("method") or m.get("id") for m in messages] == ["notifications/message", 12]
        assert messages[0]["params"]["data"] == "working"
        assert messages[1]["result"]["content"][0]["text"] == "answered"
        assert c.request("ping")["result"] == {}  # one more round trip for anything misrouted to arrive
        c.delete()  # ends the GET stream
        reader.join(timeout=10)
        assert not reader.is_alive()
        assert on_get == []


def test_concurrent_sessions_do_not_share_workers(fake_router: RouterThread) -> None:
    clients = [RawClient(fake_router.url) for _ in range(5)]
    try:
        for i, c in enumerate(clients):
            c.initialize()
            c.text("remember", key="k", value=f"v{i}")
        pids = set()
        for i, c in enumerate(clients):
            assert c.text("recall", key="k") == f"v{i}"
            pids.add(c.text("whoami"))
        assert len(pids) == 5
    finally:
        for c in clients:
            c.delete()
            c.close()
