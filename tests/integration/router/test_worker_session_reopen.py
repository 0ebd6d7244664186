"""The worker forgot the client's MCP session but lives on: the router opens one new session
there for everyone who got the 404, and the client's GET stream moves to it.

Requests that got the worker's 404 together used to each open a worker session: the stream
followed the first while the calls went to the last, whose ``roots/list`` then reached no
client (a minute's hang with @playwright/mcp). Here the 404s are held until all of them are in,
so the race is run the same way every time. The stand-in worker's ``roots`` tool asks the
client on the GET stream (tests/integration/router/test_session_stream.py's HeldStream answers it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import anyio
import httpx
import pytest

from router.sessions.serving import RequestServing
from router.sessions.table import Session
from router.types import JSON, SSE
from tests.integration.router.test_session_stream import HeldStream, open_session
from tests.support import ACCEPT_BOTH, RouterThread, auth_headers, iter_sse, router_settings, text_of, wait_for
from workers.browser import find_browser
from workers.orphans import processes_for

CALL_TIMEOUT: Final = 10.0  # a call that waits for a roots/list nobody relays hangs far longer
REOPENED: Final = "worker session reopened"


class HeldReopens:
    """Stands in front of ``RequestServing.reopen_worker_session`` on the router's loop: each
    request that got the worker's 404 waits there until ``count`` have, then they go on
    together, or (``one_after_another``) each only once the one before has finished its reopen
    (a 404 that arrives after the worker session was reopened already)."""

    def __init__(self, serving: RequestServing, count: int, *, one_after_another: bool = False) -> None:
        self.reopen = serving.reopen_worker_session
        self.count = count
        self.one_after_another = one_after_another
        self.arrived = 0
        self._all_in: anyio.Event | None = None
        self._turn: anyio.Lock | None = None

    async def __call__(self, session: Session, connection: Any, *, lost: str | None = None) -> bool:
        if self._all_in is None or self._turn is None:  # made on the router's loop
            self._all_in, self._turn = anyio.Event(), anyio.Lock()
        self.arrived += 1
        if self.arrived >= self.count:
            self._all_in.set()
        await self._all_in.wait()
        if not self.one_after_another:
            return await self.reopen(session, connection, lost=lost)
        async with self._turn:
            return await self.reopen(session, connection, lost=lost)


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("reopen")
    # Never reaped here: a reap would take the resume path, not the reopen.
    with RouterThread(router_settings(state, idle_timeout=600, keepalive_interval=0.2)) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=15)


def forget_worker_session(session: Session) -> str:
    """The worker ends the client's MCP session (as @playwright/mcp does after a missed ping)
    and with it that session's stream; returns the id it forgot."""
    connection, forgotten = session.connection, session.worker_session_id
    assert connection is not None and forgotten is not None
    # The router's own session has taken its share of a real worker's browser (browser_watch.py):
    # else Playwright would close the browser with the client's session, the last sharing it.
    wait_for(lambda: find_browser(connection.worker.pid) is None or _control_shares_browser(session), timeout=10)
    headers = {"host": connection.host_header, "mcp-session-id": forgotten}
    assert httpx.delete(connection.url, headers=headers, timeout=10, trust_env=False).status_code == 200
    # The stream relay has seen its worker stream end (no relay stands): the calls below wait for
    # the next one as they would after a real missed ping.
    wait_for(lambda: not session.relay_ready.is_set(), timeout=10)
    return forgotten


def _control_shares_browser(session: Session) -> bool:
    return session.control is not None and session.control.shares_browser


def roots_call(url: str, session_id: str, request_id: int) -> str:
    """The stand-in's ``roots`` tool called on its own connection: its text, or what went wrong
    within CALL_TIMEOUT (the answer's keep-alives would keep a read timeout from firing)."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "roots", "arguments": {}}}
    headers = {"content-type": JSON, "accept": ACCEPT_BOTH, "mcp-session-id": session_id, **auth_headers()}
    deadline = time.monotonic() + CALL_TIMEOUT
    with (
        httpx.Client(timeout=CALL_TIMEOUT, trust_env=False) as http,
        http.stream("POST", url, json=body, headers=headers) as response,
    ):
        if not response.headers.get("content-type", "").startswith(SSE):
            return f"HTTP {response.status_code}: {response.read()[:300]!r}"
        for event in iter_sse(response):
            if event.get("id") == request_id:
                return text_of(event) if "result" in event else f"error: {event}"
            if time.monotonic() > deadline:
                break
    return f"call {request_id} not answered within {CALL_TIMEOUT} s"


def roots_calls_at_once(router: RouterThread, session_id: str, count: int) -> list[str]:
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda n: roots_call(router.url, session_id, 900 + n), range(count)))


@pytest.mark.parametrize("together", [True, False], ids=["404s-together", "second-404-after-the-reopen"])
def test_requests_that_got_the_404_share_one_new_worker_session(
    router: RouterThread, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, together: bool
) -> None:
    with open_session(router) as c:
        stream = HeldStream(c.url, c.session_id or "", "t").start()
        assert c.text("roots") == "file:///t/1"
        session = router.manager.sessions.get(c.session_id)
        connection = session.connection
        forgotten = forget_worker_session(session)
        serving = router.manager.requests
        held = HeldReopens(serving, 2, one_after_another=not together)
        monkeypatch.setattr(serving, "reopen_worker_session", held)
        with caplog.at_level(logging.INFO, logger="mcp_router.continuity"):
            texts = roots_calls_at_once(router, c.session_id or "", 2)
        assert held.arrived == 2, "both calls got the worker's 404"
        # One new worker session, the stream on it: the worker's questions reach the client
        # and its answers go back to the session that asked, so both calls end at once.
        assert sorted(texts) == ["file:///t/2", "file:///t/3"], texts
        assert caplog.text.count(REOPENED) == 1, caplog.text
        assert session.connection is connection and session.worker_session_id != forgotten
        wait_for(lambda: stream.answer_statuses == [202, 202, 202], timeout=5)
        assert c.text("roots") == "file:///t/4"
        assert c.delete().status_code == 200
        stream.join()


def test_the_get_stream_leaves_a_worker_session_that_is_still_open(router: RouterThread) -> None:
    """The session reopened on the same worker while the old worker session, and its stream,
    live on (the worker answered 404 for the session the router named): the client's stream
    moves to the new one rather than reading the old until the worker ends it."""
    with open_session(router) as c:
        stream = HeldStream(c.url, c.session_id or "", "m").start()
        assert c.text("roots") == "file:///m/1"
        session = router.manager.sessions.get(c.session_id)
        connection, still_open = session.connection, session.worker_session_id
        # The router's next request names a session the worker does not know: its 404 makes the
        # router reopen, while the worker keeps the old session and its stream open.
        session.worker_session_id = "forgotten-by-the-worker"
        [text] = roots_calls_at_once(router, c.session_id or "", 1)
        assert text == "file:///m/2"
        assert session.connection is connection and session.worker_session_id not in (still_open, None)
        assert c.text("roots") == "file:///m/3"
        assert not stream.ended.is_set()
        assert c.delete().status_code == 200
        stream.join()
