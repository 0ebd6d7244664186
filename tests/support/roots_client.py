"""A client in Claude Code's shape as far as roots go: its initialize (roots declared, with
``listChanged``), and its GET stream held in a thread (``ProjectStream``): every ``roots/list``
(the router's own and the worker's) answered with the client's project directory, which a test
may move, and every ping answered. Where @playwright/mcp writes a file given by a relative name
(``browser_take_screenshot``'s ``filename``) tells which project its session took."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import httpx

from router.sessions.roots import ROOTS_METHOD, ROUTER_ID_PREFIX
from tests.support.auth import auth_headers
from tests.support.client import RawClient
from tests.support.sse import iter_sse

OPEN_WITHIN: Final = 10.0
STREAM_TIMEOUT: Final = 60.0  # longer than the router's keep-alive interval
JOIN_WITHIN: Final = 10.0
CC_PARAMS: Final = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}},
    "clientInfo": {"name": "claude-code", "version": "2.0"},
}


@contextmanager
def cc_session(url: str) -> Iterator[RawClient]:
    """A session opened in Claude Code's shape (initialized, no GET stream yet). Never DELETEd here."""
    with RawClient(url) as client:
        response = client.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": CC_PARAMS})
        assert response.status_code == 200, response.text
        client.session_id = response.headers["mcp-session-id"]
        assert client.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        yield client


class ProjectStream:
    def __init__(self, url: str, session_id: str, project: Path) -> None:
        self.url = url
        self.session_id = session_id
        self.project = project  # a directory: what roots/list is answered with, now
        self.router_asked = 0  # the router's own roots/list (router/sessions/roots.py)
        self.worker_asked = 0  # a worker's roots/list, relayed by the router
        self.pings = 0
        self.opened = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ProjectStream:
        self._thread.start()
        assert self.opened.wait(OPEN_WITHIN), "the GET stream did not open"
        return self

    def counts(self) -> tuple[int, int]:
        """(the router's roots/list answered, the workers')"""
        with self._lock:
            return self.router_asked, self.worker_asked

    def join(self) -> None:
        """Once the router has ended the stream (the session ended, or the router did)."""
        self._thread.join(JOIN_WITHIN)
        assert not self._thread.is_alive(), "the GET stream did not end"

    def _run(self) -> None:
        headers = {"accept": "text/event-stream", "mcp-session-id": self.session_id, **auth_headers()}
        try:
            with (
                httpx.Client(timeout=STREAM_TIMEOUT, trust_env=False) as http,
                http.stream("GET", self.url, headers=headers) as response,
            ):
                assert response.status_code == 200, response.status_code
                self.opened.set()
                for event in iter_sse(response):
                    if event.get("method") in (ROOTS_METHOD, "ping") and "id" in event:
                        self._answer(event)
        except httpx.HTTPError:
            pass  # the router went away
        finally:
            self.opened.set()

    def _answer(self, request: dict[str, Any]) -> None:
        result: dict[str, Any] = {}
        with self._lock:
            if request["method"] == "ping":
                self.pings += 1
            else:
                result = {"roots": [{"uri": self.project.as_uri(), "name": self.project.name}]}
        with RawClient(self.url) as other:
            other.session_id = self.session_id
            other.post({"jsonrpc": "2.0", "id": request["id"], "result": result})
        if request["method"] == ROOTS_METHOD:
            with self._lock:  # counted once answered: a test waits for the answer, not the question
                if str(request["id"]).startswith(ROUTER_ID_PREFIX):
                    self.router_asked += 1
                else:
                    self.worker_asked += 1
