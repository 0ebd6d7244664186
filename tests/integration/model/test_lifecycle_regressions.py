"""Sequences the lifecycle model found, shrunk, kept as ordinary tests: each fails on the tree
that had the bug. (Steps as hypothesis prints them; the invariants run after each, as there.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.integration.model.model import EVICTABLE_AFTER, LifecycleModel

pytestmark = pytest.mark.model

Step = Callable[[LifecycleModel], object]


@pytest.fixture
def model() -> Iterator[LifecycleModel]:
    machine = LifecycleModel()
    try:
        yield machine
    finally:
        machine.teardown()


def replay(model: LifecycleModel, *steps: Step) -> None:
    for step in steps:
        step(model)
        model.router_agrees()
        model.every_answer_recorded_once()


@pytest.mark.parametrize("delay", [0.05, 0.1])
def test_a_call_on_a_session_deleted_while_it_resumed_is_404(model: LifecycleModel, delay: float) -> None:
    """The call waited for its worker to come back; the DELETE ended the session meanwhile: the
    call got 502 'Worker not available' (a worker failure, to a client that must not retry
    there) where the session had ended: 404."""
    replay(
        model,
        lambda m: m.start(max_live_workers=1, max_sessions=3, resume_reserve=0),
        lambda m: m.open_session(claude_code=False),
        lambda m: m.call(index=0, tool="browser_click"),
        lambda m: m.pass_idle_time(),
        lambda m: m.delete_during_call(index=0, delay=delay),
    )


def test_an_initialize_during_the_start_up_probe_waits_for_it(model: LifecycleModel) -> None:
    """At --max-live-workers 1 the start-up handshake probe holds the one worker slot: a client's
    initialize arriving then spawned a worker of its own for the handshake and was refused 503."""
    replay(
        model,
        lambda m: m.start(max_live_workers=1, max_sessions=3, resume_reserve=0),
        lambda m: m.open_session(claude_code=True),
    )


def test_a_router_restart_gives_a_degraded_session_a_new_restart_budget(model: LifecycleModel) -> None:
    """Three crashes degrade the session (503); a new run of the router gives it a new budget, and
    its next call resumes it (the model had expected 503 for ever)."""
    replay(
        model,
        lambda m: m.start(max_live_workers=1, resume_reserve=0, max_sessions=3, opening=[False]),
        lambda m: m.kill_worker_during_call(index=0),
        lambda m: m.kill_worker_during_call(index=0),
        lambda m: m.kill_worker_during_call(index=0),
        lambda m: m.restart_router(kill=False),
        lambda m: m.call(index=0, tool="browser_click"),
    )


def test_a_new_session_after_a_restart_makes_room_once_the_old_ones_are_loaded(model: LifecycleModel) -> None:
    """After a restart at --max-sessions, a new session came before the Claude-Code-shaped ones'
    streams had reopened (and loaded them): the router needed no room, the model expected one
    eviction and counted the sessions not loaded yet as ended."""
    replay(
        model,
        lambda m: m.start(resume_reserve=0, max_sessions=3, max_live_workers=1, opening=[True, True]),
        lambda m: m.open_session(claude_code=True),
        lambda m: m.restart_router(kill=False),
        lambda m: m.open_session(claude_code=False),
    )


def test_sessions_loaded_after_a_restart_that_never_browsed_make_room(model: LifecycleModel) -> None:
    """Loaded from disk after a restart, sessions that never used a browser came back as
    'interrupted', and only 'new' ones were ended to make room: at --max-sessions every new
    session got 503 until the retention (24 h) ended one."""
    replay(
        model,
        lambda m: m.start(resume_reserve=0, max_sessions=3, max_live_workers=1, opening=[True, True]),
        lambda m: m.open_session(claude_code=True),
        lambda m: m.restart_router(kill=False),
        lambda m: m.pause(EVICTABLE_AFTER + 0.5),
        lambda m: m.open_session(claude_code=False),
    )


def test_a_session_that_browsed_is_not_ended_to_make_room_after_a_kill(model: LifecycleModel) -> None:
    """A session whose only call was a snapshot (no state saved) and whose router was SIGKILLed:
    loaded again, it must still count as having had a browser, and a newer idle one makes room."""
    replay(
        model,
        lambda m: m.start(resume_reserve=0, max_sessions=3, max_live_workers=1, opening=[True]),
        lambda m: m.call(index=0, tool="browser_snapshot"),
        lambda m: m.restart_router(kill=True),
        lambda m: m.open_session(claude_code=False),
        lambda m: m.open_session(claude_code=False),
        lambda m: m.pause(EVICTABLE_AFTER + 0.5),
        lambda m: m.open_session(claude_code=False),
    )


def test_a_claude_code_session_resumed_on_a_shared_worker_keeps_its_roots(model: LifecycleModel) -> None:
    """Its stream taken over twice, its host killed: the resume restores through the session's
    own MCP session on the new host, whose roots/list the router answers while it holds the
    stream. It answered none (its roots not known yet, asked again on the new stream) and the
    worker session worked in no roots for the rest of its life."""
    replay(
        model,
        lambda m: m.start(max_live_workers=1, max_sessions=3, resume_reserve=0, sessions_per_browser=2),
        lambda m: m.bad_request(index=2, kind="forged"),
        lambda m: m.open_session(claude_code=True),
        lambda m: m.calls_at_once(index=0, tools=["browser_navigate", "browser_snapshot"]),
        lambda m: m.take_over_stream(index=2),
        lambda m: m.calls_at_once(index=3, tools=["browser_click", "browser_navigate", "browser_click"]),
        lambda m: m.take_over_during_call(index=1),
        lambda m: m.kill_worker(index=3),
        lambda m: m.delete(index=1),
        lambda m: m.calls_at_once(index=2, tools=["browser_snapshot", "browser_click", "browser_navigate"]),
    )
