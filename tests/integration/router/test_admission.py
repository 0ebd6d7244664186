"""Who gets a worker and who gets remembered, under pressure: a flood of handshakes, the session
cap, a DELETE racing a resume. With the stand-in worker."""

from __future__ import annotations

import errno
import os
import signal
import threading
from pathlib import Path

import pytest

from router.sessions.admission import RateLimit
from router.sessions.table import State
from tests.support import RawClient, RouterThread, initialize_body, router_settings, wait_for
from workers.orphans import processes_for


def test_rate_limit_refills_at_its_rate() -> None:
    now = [0.0]
    limit = RateLimit(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limit.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.5  # one token back
    assert limit.take() and not limit.take()


def test_a_flood_of_handshakes_never_ends_a_session_that_browsed(state_dir: Path) -> None:
    settings = router_settings(state_dir, max_sessions=3, idle_timeout=0.2)
    with RouterThread(settings) as router, RawClient(router.url) as used:
        used.initialize()
        used.start_worker()
        wait_for(lambda: not processes_for(state_dir, used.session_id), timeout=10)  # reaped: dormant
        answers = []
        for _ in range(6):
            with RawClient(router.url) as flood:
                answers.append(flood.post(initialize_body()).status_code)
        # Handshake-only sessions make room for each other once idle; the used one is kept.
        assert answers.count(200) >= 2 and set(answers) <= {200, 503}, answers
        session = router.manager.sessions.get(used.session_id)
        assert session is not None and session.state is State.REAPED
        assert used.text("echo", text="still mine") == "still mine"
        assert used.delete().status_code == 200


def test_handshakes_past_the_rate_get_429_with_retry_after(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as c:
        router.manager.initialize_rate.burst = 2
        router.manager.initialize_rate.rate = 0.01
        codes = [c.post(initialize_body()) for _ in range(4)]
        assert [r.status_code for r in codes][:2] == [200, 200]
        refused = codes[-1]
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == -32603 and refused.json()["id"] == 1


def test_delete_during_a_resume_after_a_crash_frees_the_slot(state_dir: Path) -> None:
    settings = router_settings(state_dir, max_live_workers=1, restart_backoff=[0.3])
    with RouterThread(settings) as router, RawClient(router.url) as a, RawClient(router.url) as b:
        a.initialize()
        a.start_worker()
        worker = router.manager.supervisor.get(a.session_id)
        os.killpg(worker.pgid, signal.SIGKILL)
        wait_for(lambda: router.manager.sessions.get(a.session_id).state is State.CRASHED, timeout=10)
        resumed: list[int] = []
        call = threading.Thread(
            target=lambda: resumed.append(a.post({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                                                  "params": {"name": "echo", "arguments": {"text": "x"}}}).status_code)
        )  # fmt: skip
        call.start()
        wait_for(lambda: router.manager.sessions.get(a.session_id).in_flight, timeout=5)  # resuming now
        assert a.delete().status_code == 200
        call.join(timeout=30)
        assert resumed and resumed[0] in (200, 404, 502, 503)
        wait_for(lambda: not processes_for(state_dir, a.session_id), timeout=10)
        # The one slot is free again: another session gets a worker.
        b.initialize()
        assert b.text("echo", text="room") == "room"
        assert len(router.manager.admission) == 1
        b.delete()


def test_an_answer_past_the_event_limit_fails_that_call_only(state_dir: Path) -> None:
    """A 17 MiB answer event: the call gets a clear JSON-RPC error, the session and others go on."""
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as a, RawClient(router.url) as b:
        a.initialize()
        b.initialize()
        answer = a.call("big", size=17 * 1024 * 1024)
        assert "error" in answer and "too large" in answer["error"]["message"], str(answer)[:300]
        assert b.text("echo", text="unaffected") == "unaffected"
        assert a.text("echo", text="and on") == "and on"
        a.delete()
        b.delete()


def test_a_disk_that_refuses_the_session_file_does_not_take_sessions_down(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk at initialize or at a reap: logged loudly, the session still serves and resumes."""
    from router.sessions import statefiles

    def full_disk(session_dir: Path, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(statefiles, "write_session_file", full_disk)
    with RouterThread(router_settings(state_dir, idle_timeout=0.3)) as router, RawClient(router.url) as c:
        c.initialize()  # answered, not a 500
        c.start_worker()
        wait_for(lambda: router.manager.sessions.get(c.session_id).state is State.REAPED, timeout=10)
        assert c.text("echo", text="still here") == "still here"  # resumed all the same
        assert router.app.state.health.ok
        c.delete()
    assert "session file not written" in caplog.text
