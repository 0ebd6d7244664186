"""Spawning, capacity, crashes and idle reaping, with the stand-in worker."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support import RawClient, RouterThread, auth_headers, initialize_body, iter_sse, router_settings, wait_for
from workers.orphans import processes_for


def test_idle_session_is_reaped_even_with_an_open_get_stream(tmp_path: Path, state_dir: Path) -> None:
    settings = router_settings(state_dir, idle_timeout=1.0)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        assert processes_for(state_dir, c.session_id)
        stream_ended = threading.Event()

        def hold_get_stream() -> None:
            headers = {"accept": "text/event-stream", "mcp-session-id": c.session_id or "", **auth_headers()}
            with httpx.Client(timeout=30) as http, http.stream("GET", c.url, headers=headers) as r:
                for _ in r.iter_bytes():
                    pass
            stream_ended.set()

        threading.Thread(target=hold_get_stream, daemon=True).start()
        # Notifications do not count as activity: keep sending them, the session is reaped anyway.
        deadline = time.monotonic() + 10
        while processes_for(state_dir, c.session_id) and time.monotonic() < deadline:
            c.post({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
            time.sleep(0.2)
        assert not processes_for(state_dir, c.session_id)
        assert stream_ended.wait(10), "the GET stream must end when its worker is reaped"
        # The id outlives its worker (issue 4): the next request resumes it on a new worker.
        assert (state_dir / "sessions" / (c.session_id or "") / "profile").is_dir()
        assert not (state_dir / "sessions" / (c.session_id or "") / "out").exists()
        answer = c.request("tools/list")
        assert "echo" in {t["name"] for t in answer["result"]["tools"]}
        assert processes_for(state_dir, c.session_id)
        assert c.delete().status_code == 200
        assert not (state_dir / "sessions" / (c.session_id or "")).exists()


def test_in_flight_request_is_not_reaped(state_dir: Path) -> None:
    settings = router_settings(state_dir, idle_timeout=0.5)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        assert c.text("slow", seconds=2.0) == "done"
        # Right after a long call the idle clock starts again from its end.
        assert c.text("echo", text="still here") == "still here"
        c.delete()


def test_capacity_answers_503_with_retry_after(state_dir: Path) -> None:
    settings = router_settings(state_dir, max_sessions=1)
    with RouterThread(settings) as router, RawClient(router.url) as first, RawClient(router.url) as second:
        first.initialize()
        r = second.post(initialize_body())
        assert r.status_code == 503
        assert int(r.headers["retry-after"]) > 0
        assert r.json()["error"]["code"] == -32603
        first.delete()
        second.initialize()
        second.delete()


def test_spawn_failure_is_503_with_stderr_tail(state_dir: Path) -> None:
    command = [sys.executable, "-c", "import sys; sys.stderr.write('cannot start: no browser here'); sys.exit(7)"]
    settings = router_settings(state_dir, worker_command=command)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        r = c.post(initialize_body())
        assert r.status_code == 503
        error = r.json()["error"]
        assert "no browser here" in error["data"]["stderr"]
        assert r.json()["id"] == 1


def test_worker_crash_mid_call_gives_an_error_for_that_call(state_dir: Path) -> None:
    settings = router_settings(state_dir)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        body = {"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "crash", "arguments": {}}}
        started = time.monotonic()
        r = c.post(body)
        elapsed = time.monotonic() - started
        assert elapsed < 5
        messages: list[dict[str, Any]]
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            messages = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        else:
            messages = [r.json()]
        errors = [m for m in messages if m.get("id") == 21 and "error" in m]
        assert errors, r.text
        # A crash does not end the session: the next request resumes it on a new worker.
        wait_for(lambda: not processes_for(state_dir, c.session_id), timeout=10)
        assert c.text("echo", text="back") == "back"
        c.delete()


def test_delete_ends_the_worker_and_forgets_the_id(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as c:
        c.initialize()
        assert processes_for(state_dir, c.session_id)
        assert c.delete().status_code == 200
        assert not processes_for(state_dir, c.session_id)
        assert c.delete().status_code == 404


def test_shutdown_ends_every_worker(state_dir: Path) -> None:
    router = RouterThread(router_settings(state_dir))
    with router:
        clients = [RawClient(router.url) for _ in range(3)]
        for c in clients:
            c.initialize()
        assert len(processes_for(state_dir)) >= 3
        started = time.monotonic()
    assert time.monotonic() - started < 10
    assert not processes_for(state_dir)
    for c in clients:
        c.close()


def test_get_stream_ends_when_session_deleted(fake_router: RouterThread) -> None:
    with RawClient(fake_router.url) as c:
        c.initialize()
        ended = threading.Event()

        def hold() -> None:
            headers = {"accept": "text/event-stream", "mcp-session-id": c.session_id or "", **auth_headers()}
            with httpx.Client(timeout=30) as http, http.stream("GET", c.url, headers=headers) as r:
                for _ in iter_sse(r):
                    pass
            ended.set()

        threading.Thread(target=hold, daemon=True).start()
        wait_for(lambda: fake_router.manager.sessions.get(c.session_id) is not None)
        assert c.delete().status_code == 200
        assert ended.wait(10)
