"""Spawning, capacity, crashes and idle reaping, with the stand-in worker."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from pathlib import Path

import httpx

from router.sessions.table import State
from tests.support import (
    FAKE_WORKER,
    RawClient,
    RouterThread,
    auth_headers,
    initialize_body,
    iter_sse,
    messages_of,
    router_settings,
    wait_for,
    whoami,
)
from workers.orphans import processes_for


def test_idle_session_is_reaped_even_with_an_open_get_stream(state_dir: Path) -> None:
    """The worker goes, the client's GET stream stays (it belongs to the session) and the session
    resumes on a new worker at the next request; DELETE ends the stream."""
    settings = router_settings(state_dir, idle_timeout=1.0, keepalive_interval=0.5)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        assert not processes_for(state_dir, c.session_id), "initialize alone starts no worker"
        c.start_worker()
        assert processes_for(state_dir, c.session_id)
        stream_ended = threading.Event()
        keepalives_after_reap = threading.Event()

        def hold_get_stream() -> None:
            headers = {"accept": "text/event-stream", "mcp-session-id": c.session_id or "", **auth_headers()}
            with httpx.Client(timeout=30) as http, http.stream("GET", c.url, headers=headers) as r:
                for event in iter_sse(r):
                    if "comment" in event and not processes_for(state_dir, c.session_id):
                        keepalives_after_reap.set()
            stream_ended.set()

        threading.Thread(target=hold_get_stream, daemon=True).start()
        # Notifications do not count as activity: keep sending them, the session is reaped anyway.
        deadline = time.monotonic() + 10
        while processes_for(state_dir, c.session_id) and time.monotonic() < deadline:
            c.post({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
            time.sleep(0.2)
        assert not processes_for(state_dir, c.session_id)
        assert keepalives_after_reap.wait(10), "the GET stream stays open, with keep-alives, after the reap"
        assert not stream_ended.is_set()
        # The id outlives its worker: the next request resumes it on a new worker.
        assert (state_dir / "sessions" / (c.session_id or "") / "profile").is_dir()
        assert not (state_dir / "sessions" / (c.session_id or "") / "out").exists()
        assert c.text("echo", text="back") == "back"
        assert processes_for(state_dir, c.session_id)
        assert c.delete().status_code == 200
        assert stream_ended.wait(10), "DELETE ends the session and its GET stream"
        assert not (state_dir / "sessions" / (c.session_id or "")).exists()


def test_in_flight_request_is_not_reaped_then_the_idle_session_is_and_resumes(state_dir: Path) -> None:
    settings = router_settings(state_dir, idle_timeout=0.5)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        first = whoami(c)
        session = router.manager.sessions.get(c.session_id)
        # A call four idle timeouts long: its worker and the session stay live all through it.
        done = threading.Event()
        call = threading.Thread(target=lambda: c.text("slow", seconds=2.0) == "done" and done.set())
        call.start()
        while call.is_alive():
            assert session.state is State.LIVE and processes_for(state_dir, c.session_id) == [first["pid"]]
            call.join(timeout=0.05)
        assert done.is_set(), "the slow call failed"
        # Idle from then on: reaped for real, its worker gone and its output dir with it.
        wait_for(lambda: session.state is State.REAPED, timeout=10)
        wait_for(lambda: not processes_for(state_dir, c.session_id), timeout=10)
        wait_for(lambda: not os.path.exists(f"/proc/{first['pid']}"), timeout=10)  # ended and waited for
        wait_for(lambda: not (state_dir / "sessions" / (c.session_id or "") / "out").exists(), timeout=10)
        # The id outlives its worker: the next call resumes it on a new one.
        assert c.text("echo", text="still here") == "still here"
        assert session.state is State.LIVE
        assert whoami(c)["pid"] != first["pid"]
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


def test_a_call_whose_worker_cannot_start_is_in_the_record(state_dir: Path) -> None:
    # A request's row is written as the request leaves for its worker; one that never leaves
    # (here its worker's spawn fails) is in the record all the same.
    refuse = state_dir / "refuse-workers"
    command = ["sh", "-c", f"test -e {refuse} && exit 7; exec {sys.executable} {FAKE_WORKER} {{port}}"]
    settings = router_settings(state_dir, worker_command=command, record=True)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()  # answered from the handshake the start-up probe cached
        refuse.touch()
        body = {"jsonrpc": "2.0", "id": 22, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
        assert c.post(body).status_code == 503

        def asked() -> list[tuple[str, str]]:
            with sqlite3.connect(state_dir / "router.db") as db:
                return db.execute("SELECT session_id, tool FROM requests WHERE method = 'tools/call'").fetchall()

        wait_for(lambda: asked() != [])
        assert asked() == [(c.session_id, "echo")]


def test_worker_crash_mid_call_gives_an_error_for_that_call(state_dir: Path) -> None:
    settings = router_settings(state_dir)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        body = {"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "crash", "arguments": {}}}
        started = time.monotonic()
        r = c.post(body)
        elapsed = time.monotonic() - started
        assert elapsed < 5
        errors = [m for m in messages_of(r) if m.get("id") == 21 and "error" in m]
        assert errors, r.text
        # A crash does not end the session: the next request resumes it on a new worker.
        wait_for(lambda: not processes_for(state_dir, c.session_id), timeout=10)
        assert c.text("echo", text="back") == "back"
        c.delete()


def test_delete_ends_the_worker_and_forgets_the_id(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
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
            c.start_worker()
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
