"""WorkerQuestions: the ids the client sees for the workers' requests, and whom each answer is for."""

from __future__ import annotations

from typing import Any, cast

from router.sessions.asked import MAX_ASKED, WorkerQuestions
from router.sessions.roots import ROUTER_ID_PREFIX
from router.types import CANCELLED
from router.upstream.connection import WorkerConnection

WORKER = cast(WorkerConnection, object())  # compared by identity only
OTHER_WORKER = cast(WorkerConnection, object())


def ping(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


def cancel(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": CANCELLED, "params": {"requestId": request_id, "reason": "timed out"}}


def test_each_worker_session_counting_from_zero_gets_ids_of_its_own() -> None:
    asked = WorkerQuestions()
    first, second = ping(0), ping(0)
    assert asked.renumber(first, WORKER, "ws-1") and asked.renumber(second, WORKER, "ws-2")
    assert first["id"] != second["id"]
    assert all(WorkerQuestions.ours(m["id"]) and not m["id"].startswith(ROUTER_ID_PREFIX) for m in (first, second))
    # After a router restart the session's table is a new one: its ids are new too.
    again = ping(0)
    WorkerQuestions().renumber(again, WORKER, "ws-3")
    assert again["id"] not in (first["id"], second["id"])


def test_an_answer_goes_back_under_the_worker_id_to_the_session_that_asked_only_once() -> None:
    asked = WorkerQuestions()
    message = ping(7)
    asked.renumber(message, WORKER, "ws-1")
    asker = asked.take(message["id"])
    assert asker is not None and asker.request_id == 7
    assert asker.is_from(WORKER, "ws-1")
    assert not asker.is_from(WORKER, "ws-2") and not asker.is_from(OTHER_WORKER, "ws-1")
    assert asked.take(message["id"]) is None  # answered already
    assert asked.take(7) is None  # the worker's own id is not one the client was given


def test_a_worker_cancel_names_the_id_the_client_saw_for_that_session_only() -> None:
    asked = WorkerQuestions()
    old, new = ping(0), ping(0)
    asked.renumber(old, WORKER, "ws-1")
    asked.renumber(new, WORKER, "ws-2")
    gave_up = cancel(0)
    assert asked.renumber(gave_up, WORKER, "ws-2")
    assert gave_up["params"]["requestId"] == new["id"]
    unknown = cancel(5)
    assert not asked.renumber(unknown, WORKER, "ws-2")  # nothing the client was asked: as it came
    assert unknown["params"]["requestId"] == 5
    notification = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert not asked.renumber(notification, WORKER, "ws-2")


def test_what_it_remembers_is_bounded() -> None:
    asked = WorkerQuestions()
    messages = [ping(n) for n in range(MAX_ASKED + 5)]
    for message in messages:
        asked.renumber(message, WORKER, "ws-1")
    assert len(asked) == MAX_ASKED
    assert asked.take(messages[0]["id"]) is None  # the oldest went first
    taken = asked.take(messages[-1]["id"])
    assert taken is not None and taken.request_id == MAX_ASKED + 4
