"""A worker that ended the client's MCP session while the client holds its GET stream (as
@playwright/mcp does after a ping that went unanswered): the stream hears of it from the worker's
404, and the client's next call is sent on a new worker session at once.

Each call used to wait RELAY_WAIT first for the relay to stand, which it could not (its own GET to
the worker got the 404 too), and only then was sent, got the 404 and reopened.
"""

from __future__ import annotations

import logging
import time

import pytest

from router.sessions.serving import RELAY_WAIT
from tests.integration.router.test_session_stream import HeldStream, open_session
from tests.integration.router.test_worker_session_reopen import forget_worker_session
from tests.support import RouterThread, wait_for


def refused_as_lost(session_id: str) -> str:
    """What the router logs when the worker answers the client stream's GET with 404."""
    return f"worker refused the GET stream session={session_id} status=404"


def test_the_call_after_the_worker_ended_the_session_is_not_held_for_the_relay(
    fake_router: RouterThread, caplog: pytest.LogCaptureFixture
) -> None:
    router = fake_router
    with open_session(router) as c:
        stream = HeldStream(c.url, c.session_id or "", "lost").start()
        assert c.text("roots") == "file:///lost/1"
        session = router.manager.sessions.get(c.session_id)
        connection = session.connection
        with caplog.at_level(logging.DEBUG, logger="mcp_router.streams"):
            forgotten = forget_worker_session(session)
            # The client's stream asked the worker for that session's stream again: 404.
            wait_for(lambda: refused_as_lost(c.session_id or "") in caplog.text, timeout=10)
            began = time.monotonic()
            assert c.text("echo", text="still here") == "still here"
            took = time.monotonic() - began
        assert took < RELAY_WAIT / 2, f"the call took {took:.2f} s"
        assert session.connection is connection and session.worker_session_id != forgotten
        # The client's stream relays the new worker session: its question reaches the client.
        assert c.text("roots") == "file:///lost/2"
        assert c.delete().status_code == 200
        stream.join()
