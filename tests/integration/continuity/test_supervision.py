"""Restart budget, health checks and router-wide spawn failures, with the stand-in worker."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import router.sessions.upkeep
import workers.health
from router.sessions.table import State
from tests.support import RawClient, RouterThread, dead, initialize_body, router_settings, wait_for, whoami
from workers.orphans import processes_for

BUDGET_WINDOW = 60.0
PASSED_WINDOW = 0.01
DYING_FOR = 0.3  # from the reset to the exit: well inside the endpoint's DEATH_WAIT
LIVES_ON_FOR = 30.0  # well past it
QUICK_HEALTH = 0.2  # seconds between health checks
QUICK_PROBE = 0.5  # a live stand-in answers in milliseconds
WEDGED_WITHIN = 20.0  # three missed probes, the restart and the call's resend, on a loaded machine
LONG_CALL = 2.0


def _state(router: RouterThread, client: RawClient) -> State | None:
    session = router.manager.sessions.get(client.session_id)
    return None if session is None else session.state


def _crash(router: RouterThread, client: RawClient) -> None:
    answer = client.post(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "crash", "arguments": {}}}
    )
    assert "error" in answer.text
    wait_for(lambda: _state(router, client) is State.CRASHED, timeout=10)


def test_restart_budget_exhausted_gives_503_with_retry_after_then_recovers(state_dir: Path) -> None:
    # The window holds three crash-and-resume cycles even on a loaded machine (with 5 s the third
    # crash could land after the first restart had left it); the window's expiry itself is
    # tests/unit/workers/test_workers_health.py's, with a fake clock.
    settings = router_settings(
        state_dir, max_restarts=2, restart_window=BUDGET_WINDOW, restart_backoff=[0.05, 0.1]
    )
    with RouterThread(settings) as router, RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        for _ in range(2):
            _crash(router, c)
            assert c.text("echo", text="resumed") == "resumed"
        _crash(router, c)
        r = c.post(
            {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}
        )
        assert r.status_code == 503
        retry_after = int(r.headers["retry-after"])
        assert 1 <= retry_after <= BUDGET_WINDOW
        assert r.json()["error"]["code"] == -32603 and r.json()["id"] == 8
        assert _state(router, c) is State.DEGRADED
        assert not processes_for(state_dir, c.session_id)
        # The window passes: shortened here rather than slept through.
        budget = router.manager.sessions.get(c.session_id).budget
        budget.window = PASSED_WINDOW
        wait_for(lambda: budget.retry_after() == 0.0, timeout=5)
        assert c.text("echo", text="recovered") == "recovered"
        assert _state(router, c) is State.LIVE
        c.delete()


def test_three_failed_health_checks_restart_the_worker(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    healthy = {"value": True}

    async def fake_probe(worker: Any) -> bool:
        return healthy["value"]

    monkeypatch.setattr(router.sessions.upkeep, "probe", fake_probe)
    settings = router_settings(state_dir, health_interval=0.1, restart_backoff=[0.05])
    with RouterThread(settings) as r, RawClient(r.url) as c:
        c.initialize()
        c.start_worker()
        before = c.text("whoami")
        healthy["value"] = False  # a wedged worker: alive, but its port does not answer
        wait_for(lambda: _state(r, c) is State.CRASHED, timeout=10)
        wait_for(lambda: not processes_for(state_dir, c.session_id), timeout=10)
        healthy["value"] = True
        after = c.text("whoami")
        assert after != before  # a new process (same derived port)
        assert after.split()[1] == before.split()[1]
        c.delete()


def test_a_stopped_worker_fails_its_health_checks_and_its_call_is_answered_by_a_new_one(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stopped node (or one whose event loop is stuck) still has its connections accepted by the
    # kernel: only an HTTP answer tells it from a live one. Its call would wait for ever.
    monkeypatch.setattr(workers.health, "PROBE_TIMEOUT", QUICK_PROBE)
    settings = router_settings(state_dir, health_interval=QUICK_HEALTH, restart_backoff=[0.05])
    with RouterThread(settings) as r, RawClient(r.url) as c, ThreadPoolExecutor(1) as pool:
        c.initialize()
        wedged = whoami(c)["pid"]
        os.kill(wedged, signal.SIGSTOP)
        try:
            stuck = pool.submit(c.text, "whoami")  # sent to the stopped worker: never answered by it
            wait_for(lambda: _state(r, c) is not State.LIVE or dead(wedged), timeout=WEDGED_WITHIN)
        finally:
            with contextlib.suppress(ProcessLookupError):  # a group being ended must not stay stopped
                os.kill(wedged, signal.SIGCONT)
        answered = stuck.result(timeout=WEDGED_WITHIN)
        assert answered.startswith("pid=") and f"pid={wedged} " not in answered
        assert dead(wedged)
        c.delete()


def test_a_worker_busy_with_a_long_call_passes_its_health_checks(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers.health, "PROBE_TIMEOUT", QUICK_PROBE)
    answered: list[bool] = []

    async def counted_probe(worker: Any) -> bool:
        answered.append(await workers.health.probe(worker))
        return answered[-1]

    monkeypatch.setattr(router.sessions.upkeep, "probe", counted_probe)
    settings = router_settings(state_dir, health_interval=QUICK_HEALTH)
    with RouterThread(settings) as r, RawClient(r.url) as c:
        c.initialize()
        before = whoami(c)["pid"]
        checked = len(answered)
        # Long enough for several checks, each of which the worker answers while it sleeps.
        assert c.text("slow", seconds=LONG_CALL) != ""
        assert len(answered) >= checked + 3 and all(answered), answered
        assert whoami(c)["pid"] == before and _state(r, c) is State.LIVE
        c.delete()


def test_spawn_failing_router_wide_fails_fast_naming_the_cause(state_dir: Path, tmp_path: Path) -> None:
    # Each spawn attempt leaves a line, so "no further attempt" is counted, not timed (a timing
    # bound flakes on a loaded machine).
    attempts = tmp_path / "attempts"
    script = f"import sys; open({str(attempts)!r}, 'a').write('x'); sys.stderr.write('node: not found'); sys.exit(127)"
    command = [sys.executable, "-c", script]
    with RouterThread(router_settings(state_dir, worker_command=command)) as router, RawClient(router.url) as c:
        for _ in range(3):
            assert c.post(initialize_body()).status_code == 503
        tried = attempts.read_text().count("x")
        r = c.post(initialize_body())
        assert attempts.read_text().count("x") == tried  # no fourth spawn attempt inside the cool-down
        assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
        assert "cannot be started" in r.json()["error"]["message"]
        assert "node: not found" in r.json()["error"]["message"] + r.json()["error"]["data"]["stderr"]


def _dying(client: RawClient, tmp_path: Path, *, exit_after: float) -> None:
    """The stand-in worker stops reading once its answer is in and resets the next request."""
    go, frozen = tmp_path / "go", tmp_path / "frozen"
    assert client.text("reset_then_exit", exit_after=exit_after, go=str(go), frozen=str(frozen)) == "dying"
    go.touch()
    wait_for(frozen.exists, timeout=10)


@pytest.mark.parametrize("reset", ["request", "notification"])
def test_a_message_reset_by_a_dying_worker_that_still_listens_is_not_an_error(
    state_dir: Path, tmp_path: Path, reset: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A SIGKILLed node closes its sockets one by one: a message on a kept-alive socket is reset
    # while the listener still accepts (seen under load through the real worker). Nothing
    # answered it: a request goes to a resumed worker, a notification is taken as by a dormant
    # session.
    with RouterThread(router_settings(state_dir, restart_backoff=[0.05])) as router, RawClient(router.url) as c:
        c.initialize()
        before = c.text("whoami")
        _dying(c, tmp_path, exit_after=DYING_FOR)
        if reset == "notification":
            cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
            assert c.post(cancelled).status_code == 202
        after = c.text("whoami")  # asserts a 200 and a result
        assert after.startswith("pid=") and after != before  # a resumed worker answered
        assert _state(router, c) is State.LIVE
        # A crash, said as one: by the request that met it, or by the exit's own handling.
        assert "died under a request" in caplog.text or "exited on its own" in caplog.text
        c.delete()


def test_a_request_reset_by_a_worker_that_lives_on_gets_a_502(state_dir: Path, tmp_path: Path) -> None:
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        worker = router.manager.sessions.get(c.session_id).connection.worker
        _dying(c, tmp_path, exit_after=LIVES_ON_FOR)
        body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}
        answer = c.post(body)
        assert answer.status_code == 502, answer.text
        assert "ConnectionBroken" in answer.json()["error"]["message"]
        assert worker.alive()  # not taken for dead, nor replaced behind the client's back
        c.delete()
