"""A resume while the client's GET stream is away (a network blip, a laptop lid): the worker's
``roots/list`` cannot reach the client, so the router answers it on the stream it holds for the
worker, with the roots the client gave earlier in the session, not with none (@playwright/mcp
would keep its own cwd as the project until the next resume).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import httpx

from router.sessions.roots import ROOTS_CHANGED
from router.sessions.table import Session
from tests.integration.router import test_session_stream
from tests.integration.router.test_session_stream import open_session
from tests.support import RawClient, RouterThread, auth_headers, iter_sse, wait_for
from workers.orphans import processes_for

PROJECT: Final = "file:///home/someone/project"
reaping = test_session_stream.reaping  # a router that reaps after 1 s idle (one of this module's own)


def answered_then_away(c: RawClient, session: Session) -> None:
    """The client's GET stream opens, the router asks its roots and the client answers PROJECT,
    its worker starts; then the stream is away."""
    headers = {"accept": "text/event-stream", "mcp-session-id": session.id, **auth_headers()}
    with httpx.Client(timeout=10, trust_env=False) as http, http.stream("GET", c.url, headers=headers) as stream:
        # The router asks the client's roots itself as the stream opens; the client answers.
        events = iter_sse(stream)  # held: a reader let go of closes the stream
        question = next(e for e in events if e.get("method") == "roots/list")
        answer = {"jsonrpc": "2.0", "id": question["id"], "result": {"roots": [{"uri": PROJECT}]}}
        assert c.post(answer).status_code == 202
        assert session.roots.known == [{"uri": PROJECT}]
        c.start_worker()
    wait_for(lambda: not session.stream.held, timeout=5)


def test_a_resume_while_the_stream_is_away_gives_the_worker_the_known_roots(reaping: RouterThread) -> None:
    state = Path(reaping.settings.state_dir)
    with open_session(reaping) as c:
        sid = c.session_id or ""
        session = reaping.manager.sessions.get(sid)
        answered_then_away(c, session)
        # The worker is reaped meanwhile.
        wait_for(lambda: session.connection is None and not processes_for(state, sid), timeout=10)

        # The resumed worker asks its roots with no client stream to carry the question.
        assert c.text("roots") == PROJECT
        assert c.delete().status_code == 200


def test_a_resume_after_a_change_heard_while_the_stream_is_away_gives_the_last_roots(reaping: RouterThread) -> None:
    """The client said its roots changed, with its stream away: the router cannot ask it the new
    ones, and a resume then gives the worker the roots the client gave last (not none: most
    changes add a directory). (Asked again once its stream is back: tests/e2e/test_roots_lifecycle.py.)"""
    state = Path(reaping.settings.state_dir)
    with open_session(reaping) as c:
        sid = c.session_id or ""
        session = reaping.manager.sessions.get(sid)
        answered_then_away(c, session)
        assert c.post({"jsonrpc": "2.0", "method": ROOTS_CHANGED}).status_code == 202
        assert session.roots.known is None  # what it knew is stale now
        wait_for(lambda: session.connection is None and not processes_for(state, sid), timeout=10)

        assert c.text("roots") == PROJECT
        assert c.delete().status_code == 200
