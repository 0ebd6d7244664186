"""The client's GET stream belongs to the session and follows it from worker to worker.

The stand-in worker's ``roots`` tool asks the client ``roots/list`` on the GET stream: the answer
names the stream that carried the question and how many it had carried, so a test sees which
stream, and which worker, a question came through.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from router.sessions.roots import ROUTER_ID_PREFIX
from tests.support import RawClient, RouterThread, auth_headers, iter_sse, router_settings, wait_for
from workers.orphans import processes_for

IDLE: Final = 1.0
KEEPALIVE: Final = 0.2
ROOTS_CAPABLE: Final = {"roots": {"listChanged": True}}


class HeldStream:
    """A client's GET stream, held in a thread: it keeps what arrives and answers roots/list."""

    def __init__(self, url: str, session_id: str, tag: str) -> None:
        self.url = url
        self.session_id = session_id
        self.tag = tag
        self.status: int | None = None
        self.comments = 0
        self.asked: list[Any] = []  # ids of the workers' roots/list requests that came this way
        self.router_asked = 0  # the router's own roots/list (router/sessions/roots.py)
        self.answer_statuses: list[int] = []
        self.opened = threading.Event()
        self.ended = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> HeldStream:
        self._thread.start()
        assert self.opened.wait(10), "the GET stream did not open"
        assert self.status == 200
        return self

    def _run(self) -> None:
        headers = {"accept": "text/event-stream", "mcp-session-id": self.session_id, **auth_headers()}
        try:
            with (
                httpx.Client(timeout=30, trust_env=False) as http,
                http.stream("GET", self.url, headers=headers) as response,
            ):
                self.status = response.status_code
                self.opened.set()
                for event in iter_sse(response):
                    if "comment" in event:
                        with self._lock:
                            self.comments += 1
                    elif event.get("method") == "roots/list":
                        self._answer(event["id"])
        except httpx.HTTPError:
            pass
        finally:
            self.opened.set()
            self.ended.set()

    def _answer(self, request_id: Any) -> None:
        router_asked = str(request_id).startswith(ROUTER_ID_PREFIX)
        with self._lock:
            if router_asked:
                self.router_asked += 1
                uri = f"file:///{self.tag}/router"
            else:
                self.asked.append(request_id)
                uri = f"file:///{self.tag}/{len(self.asked)}"
        with RawClient(self.url) as other:
            other.session_id = self.session_id
            status = other.post({"jsonrpc": "2.0", "id": request_id, "result": {"roots": [{"uri": uri}]}}).status_code
        with self._lock:
            if not router_asked:
                self.answer_statuses.append(status)

    def keepalives_after(self, count: int, more: int = 2) -> bool:
        with self._lock:
            return self.comments >= count + more

    def join(self) -> None:
        self._thread.join(timeout=10)
        assert not self._thread.is_alive()


@pytest.fixture(scope="module")
def reaping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("stream")
    with RouterThread(router_settings(state, idle_timeout=IDLE, keepalive_interval=KEEPALIVE)) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=15)


def open_session(router: RouterThread) -> RawClient:
    c = RawClient(router.url)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": ROOTS_CAPABLE,
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    response = c.post(body)
    assert response.status_code == 200, response.text
    c.session_id = response.headers["mcp-session-id"]
    assert c.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    return c


def test_the_get_stream_follows_the_session_across_a_reap(reaping: RouterThread) -> None:
    state = Path(reaping.settings.state_dir)
    with open_session(reaping) as c:
        sid = c.session_id or ""
        stream = HeldStream(c.url, sid, "a").start()
        wait_for(lambda: stream.keepalives_after(0), timeout=5)
        assert not processes_for(state, sid), "a GET never starts a worker"
        wait_for(lambda: stream.router_asked == 1, timeout=5)  # the router asks the client's roots itself

        assert c.text("roots") == "file:///a/1"
        wait_for(lambda: not processes_for(state, sid), timeout=10)  # reaped as idle
        session = reaping.manager.sessions.get(sid)
        assert session.connection is None
        # The stream stays, with keep-alives, and keeps no worker alive nor starts one.
        seen = stream.comments
        wait_for(lambda: stream.keepalives_after(seen), timeout=5)
        assert not stream.ended.is_set()
        assert not processes_for(state, sid)

        # The next worker's question arrives on the same stream and its answer crosses back.
        assert c.text("roots") == "file:///a/2"
        assert len(stream.asked) == 2
        # The answers were accepted (the reader notes the status after the worker has its answer).
        wait_for(lambda: stream.answer_statuses == [202, 202], timeout=5)
        assert not stream.ended.is_set()
        assert c.delete().status_code == 200
        assert stream.ended.wait(10), "DELETE ends the session's stream"
        stream.join()


def test_an_answer_for_a_worker_that_is_gone_is_accepted(reaping: RouterThread) -> None:
    state = Path(reaping.settings.state_dir)
    with open_session(reaping) as c:
        sid = c.session_id or ""
        stream = HeldStream(c.url, sid, "b").start()
        assert c.text("roots") == "file:///b/1"
        old_id = stream.asked[0]
        wait_for(lambda: not processes_for(state, sid), timeout=10)
        # Asked by the reaped worker: accepted and dropped, and it wakes nothing.
        late = {"jsonrpc": "2.0", "id": old_id, "result": {"roots": []}}
        assert c.post(late).status_code == 202
        assert c.post({"jsonrpc": "2.0", "id": "never-asked", "result": {}}).status_code == 202
        assert not processes_for(state, sid)
        # With a new worker up, an answer to the old worker's question is still no error.
        assert c.text("roots") == "file:///b/2"
        assert c.post(late).status_code == 202
        assert c.text("echo", text="fine") == "fine"
        assert c.delete().status_code == 200
        stream.join()


def test_a_second_get_takes_over_from_the_first(reaping: RouterThread) -> None:
    state = Path(reaping.settings.state_dir)
    with open_session(reaping) as c:
        sid = c.session_id or ""
        first = HeldStream(c.url, sid, "first").start()
        assert c.text("roots") == "file:///first/1"
        second = HeldStream(c.url, sid, "second").start()
        assert first.ended.wait(10), "the older stream ends when a new one takes the session's slot"
        first.join()
        assert not second.ended.is_set()
        # The live worker's next question comes through the new stream.
        assert c.text("roots") == "file:///second/1"
        assert len(first.asked) == 1
        # And after a reap, the next worker's comes through it as well.
        wait_for(lambda: not processes_for(state, sid), timeout=10)
        assert c.text("roots") == "file:///second/2"
        assert c.delete().status_code == 200
        assert second.ended.wait(10)
        second.join()


def test_a_get_on_a_dormant_session_starts_no_worker(reaping: RouterThread) -> None:
    state = Path(reaping.settings.state_dir)
    with open_session(reaping) as c:
        sid = c.session_id or ""
        c.start_worker()
        wait_for(lambda: not processes_for(state, sid), timeout=10)
        stream = HeldStream(c.url, sid, "late").start()
        wait_for(lambda: stream.keepalives_after(0, more=3), timeout=5)
        assert not processes_for(state, sid)
        assert reaping.manager.sessions.get(sid).connection is None
        assert c.text("roots") == "file:///late/1", "the resumed worker asks through the stream opened before"
        assert c.delete().status_code == 200
        stream.join()


def test_the_get_stream_follows_a_reopened_worker_session(reaping: RouterThread) -> None:
    """The worker forgets the client's session but lives on: the router opens a new one there,
    and the stream follows it to the new worker session."""
    idle = reaping.manager.upkeep.idle_timeout
    reaping.manager.upkeep.idle_timeout = 60.0  # a reap here would take the resume path, not this one
    try:
        with open_session(reaping) as c:
            stream = HeldStream(c.url, c.session_id or "", "r").start()
            assert c.text("roots") == "file:///r/1"
            session = reaping.manager.sessions.get(c.session_id)
            connection, forgotten = session.connection, session.worker_session_id
            headers = {"host": connection.host_header, "mcp-session-id": forgotten}
            assert httpx.delete(connection.url, headers=headers, timeout=10, trust_env=False).status_code == 200
            assert c.text("roots") == "file:///r/2"
            assert session.connection is connection and session.worker_session_id != forgotten
            assert not stream.ended.is_set()
            assert c.delete().status_code == 200
            stream.join()
    finally:
        reaping.manager.upkeep.idle_timeout = idle
