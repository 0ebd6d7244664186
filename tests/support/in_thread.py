"""A request posted from a thread of its own, for tests that send another while it is in flight."""

from __future__ import annotations

import threading
from typing import Any, Final

from router.sessions.table import Session
from tests.support.client import RawClient
from tests.support.sse import messages_of
from tests.support.wait import wait_for

WAITING_WITHIN: Final = 10.0  # until a posted request is in flight
ANSWER_WITHIN: Final = 60.0  # a resume (a real worker's spawn and restore included), then the answer


def post_in_thread(url: str, session_id: str, body: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Posts ``body`` on the session from a new thread (join it); once it has joined, the result
    holds the answer's ``status`` and ``messages``."""
    result: dict[str, Any] = {}

    def post() -> None:
        with RawClient(url) as other:
            other.session_id = session_id
            response = other.post(body)
            result["status"], result["messages"] = response.status_code, messages_of(response)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, result


def cancelled_while_waiting(client: RawClient, session: Session, body: dict[str, Any]) -> dict[str, Any]:
    """Posts the request ``body`` on ``client``'s session, which has no worker yet, and cancels it
    while it waits for one (as Esc in Claude Code does); returns the answer it got."""
    thread, result = post_in_thread(client.url, session.id, body)
    wait_for(lambda: body["id"] in session.requests, timeout=WAITING_WITHIN)
    assert session.connection is None, "the worker was there before the cancel could be sent"
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": body["id"]}}
    assert client.post(cancel).status_code == 202
    thread.join(ANSWER_WITHIN)
    assert result["status"] == 200
    (answer,) = result["messages"]
    assert answer["id"] == body["id"]
    return answer
