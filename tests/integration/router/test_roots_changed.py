"""``notifications/roots/list_changed`` from a client whose GET stream is held, while its session
has a worker: the router asks the client again, and the worker the session has works in the new
roots from its next call on.

A worker that asks ``roots/list`` at each call (the stand-in's ``roots`` tool) gets the new roots
through the client's stream: the router relays its question, never answers it from what it knew.
@playwright/mcp asks once per MCP session and ignores the notification, so the session's worker
session is replaced at the next call (its successor asks the client), once per change
(tests/e2e/test_roots_lifecycle.py shows where Playwright then saves a file).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import httpx
import pytest

from router.sessions.roots import ROOTS_CHANGED
from router.sessions.table import Session
from tests.integration.router.test_session_stream import HeldStream
from tests.support import RawClient, RouterThread, auth_headers, router_settings, wait_for
from tests.support.roots_client import cc_session
from workers.orphans import processes_for

ASKED_WITHIN: Final = 10.0
# Until serving.py replaces a worker session whose roots are behind (RequestServing.renew_for_roots).
@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("roots-changed")
    with RouterThread(router_settings(state, idle_timeout=600)) as serving:
        yield serving
    wait_for(lambda: not processes_for(Path(state)), timeout=15)


def session_of(router: RouterThread, session_id: str) -> Session:
    session: Session | None = router.manager.sessions.get(session_id)
    assert session is not None
    return session


@contextmanager
def working(router: RouterThread) -> Iterator[tuple[RawClient, Session, HeldStream]]:
    """Claude Code's shape: its GET stream held, the worker's first roots/list answered (with
    ``file:///before/1``). DELETEd by the test."""
    with cc_session(router.url) as client:
        sid = client.session_id or ""
        stream = HeldStream(router.url, sid, "before").start()
        wait_for(lambda: stream.router_asked == 1, timeout=ASKED_WITHIN)
        assert client.text("roots") == "file:///before/1"
        yield client, session_of(router, sid), stream


def test_a_worker_that_asks_again_gets_the_new_roots_from_the_client(router: RouterThread) -> None:
    with working(router) as (client, session, stream):
        stream.tag = "after"  # the client's project moved: it says so
        assert client.post({"jsonrpc": "2.0", "method": ROOTS_CHANGED}).status_code == 202
        # Asked again, on the stream, and answered.
        wait_for(lambda: session.roots.known == [{"uri": "file:///after/router"}], timeout=ASKED_WITHIN)
        # The worker's own question reached the client, not an answer from what the router knew.
        assert client.text("roots") == "file:///after/2"
        wait_for(lambda: stream.answer_statuses == [202, 202], timeout=ASKED_WITHIN)
        assert client.delete().status_code == 200
        stream.join()


def test_the_next_call_after_a_change_gets_a_new_worker_session_once(router: RouterThread) -> None:
    """@playwright/mcp's way: the roots a session took at its first call are its roots for good,
    so the session the client's calls go to is replaced, once per change, never without one."""
    with working(router) as (client, session, stream):
        first = session.worker_session_id
        assert client.text("echo", text="x") == "x"
        assert session.worker_session_id == first, "renewed with no change"
        stream.tag = "after"
        assert client.post({"jsonrpc": "2.0", "method": ROOTS_CHANGED}).status_code == 202
        assert client.text("echo", text="y") == "y"
        second = session.worker_session_id
        assert second not in (None, first), "the call after the change went to the old worker session"
        assert client.text("roots").startswith("file:///after/")
        assert client.text("echo", text="z") == "z"
        assert session.worker_session_id == second, "renewed twice for one change"
        assert client.delete().status_code == 200
        stream.join()


def test_no_renewal_while_the_clients_stream_is_away(router: RouterThread) -> None:
    """A change heard with the client's stream away: a new worker session could not ask the
    client, and would be answered with no roots. The old one stays until the stream is back."""
    with working(router) as (client, session, stream):
        sid = session.id
        first = session.worker_session_id
        assert client.post({"jsonrpc": "2.0", "method": ROOTS_CHANGED}).status_code == 202
        # Away: taken over by a GET that is then closed.
        headers = {"accept": "text/event-stream", "mcp-session-id": sid, **auth_headers()}
        with httpx.Client(timeout=10, trust_env=False) as http, http.stream("GET", router.url, headers=headers):
            stream.join()
        wait_for(lambda: not session.stream.held, timeout=ASKED_WITHIN)
        assert client.text("echo", text="x") == "x"
        assert session.worker_session_id == first
        back = HeldStream(router.url, sid, "after").start()
        assert client.text("echo", text="y") == "y"
        assert session.worker_session_id != first
        assert client.delete().status_code == 200
        back.join()
