"""Sessions sharing workers (``--sessions-per-browser``, router/sessions/hosts.py) with the
stand-in worker run ``--isolated`` (a "browser", its ``clicks`` cookie and tabs, per MCP session):
placement, places given back, empty hosts ended, a host's death, the live cap, a restart."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from router.sessions.resume_notice import NOTICE_PREFIX as RESUMED_NOTICE
from router.sessions.table import State
from tests.integration.router.test_worker_session_reopen import forget_worker_session
from tests.support import STANDIN_WORKER_COMMAND, RawClient, RouterThread, router_settings, wait_for
from tests.support.auth import auth_headers
from workers.orphans import processes_for
from workers.supervisor import Worker

ISOLATED_STANDIN = [*STANDIN_WORKER_COMMAND, "--isolated"]
PAGE = "http://127.0.0.1:9/hosted"


def shared_router(state: Path, **overrides: object) -> RouterThread:
    values: dict[str, object] = {
        "worker_command": ISOLATED_STANDIN, "sessions_per_browser": 2, "max_live_workers": 3, "idle_timeout": 600,
        **overrides,
    }  # fmt: skip
    return RouterThread(router_settings(state, **values))  # type: ignore[arg-type]


@pytest.fixture
def router(tmp_path: Path) -> Iterator[RouterThread]:
    with shared_router(tmp_path) as r:
        yield r
    wait_for(lambda: not processes_for(tmp_path), timeout=10)


def opened(router: RouterThread, n: int) -> list[RawClient]:
    clients = [RawClient(router.url) for _ in range(n)]
    for c in clients:
        c.initialize()
    return clients


def done(*clients: RawClient) -> None:
    """Each client's DELETE, and its sockets closed."""
    for c in clients:
        try:
            assert c.delete().status_code == 200
        finally:
            c.close()


def worker_of(router: RouterThread, client: RawClient) -> Worker:
    session = router.manager.sessions.get(client.session_id)
    assert session is not None and session.connection is not None
    return session.connection.worker


def state_of(router: RouterThread, client: RawClient) -> State | None:
    session = router.manager.sessions.get(client.session_id)
    return None if session is None else session.state


def clicks(text: str) -> int:
    return int(text.split("clicks ", 1)[1].split("\n", 1)[0])


def browse(client: RawClient, times: int) -> None:
    client.text("browser_navigate", url=PAGE)
    for _ in range(times):
        client.text("browser_click", target="e2", element="Bump")


def test_sessions_fill_a_host_before_another_starts_and_keep_their_own_browser(router: RouterThread) -> None:
    a, b, c = opened(router, 3)
    for n, client in enumerate((a, b, c), start=1):
        browse(client, n)
    assert worker_of(router, a) is worker_of(router, b) is not worker_of(router, c)
    hosts = router.manager.hosts
    assert hosts is not None and len(hosts) == 2
    assert [clicks(x.text("browser_snapshot")) for x in (a, b, c)] == [1, 2, 3]
    health = httpx.get(f"{router.base_url}/healthz", headers=auth_headers(), timeout=10).json()
    assert (health["hosts"], health["sessions_per_browser"], health["workers"]) == (2, 2, 2)
    assert b"mcp_router_shared_workers 2.0" in router.app.state.metrics.render()
    # a's place goes back at its DELETE: the next session joins b's host, not a new one.
    host = worker_of(router, b)
    assert a.delete().status_code == 200
    (d,) = opened(router, 1)
    browse(d, 0)
    assert worker_of(router, d) is host and len(hosts) == 2
    assert clicks(d.text("browser_snapshot")) == 0  # a's context went with it
    a.close()
    done(b, c, d)


def test_concurrent_first_calls_start_as_few_hosts_as_they_fill(router: RouterThread) -> None:
    clients = opened(router, 6)
    errors: list[BaseException] = []

    def first_call(client: RawClient) -> None:
        try:
            browse(client, 1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_call, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    hosts = router.manager.hosts
    try:
        assert not errors
        assert hosts is not None
        assert len(hosts) == 3 and sorted(len(h.sessions) for h in hosts.all()) == [2, 2, 2]
    finally:
        done(*clients)


def test_a_reaped_session_comes_back_on_the_host_and_an_empty_host_ends(router: RouterThread) -> None:
    a, b = opened(router, 2)
    browse(a, 2)
    browse(b, 5)
    host = worker_of(router, a)
    upkeep = router.manager.upkeep
    upkeep.idle_timeout = 0.3
    try:
        wait_for(lambda: state_of(router, a) is State.REAPED and state_of(router, b) is State.REAPED, timeout=10)
    finally:
        upkeep.idle_timeout = 600
    assert host.alive()  # empty, but not for the hosts' idle timeout yet
    answer = a.text("browser_snapshot")
    assert RESUMED_NOTICE in answer and clicks(answer) == 2
    assert worker_of(router, a) is host  # back on the host that was up: no spawn
    hosts = router.manager.hosts
    assert hosts is not None
    hosts.idle_timeout = 0.3
    assert a.delete().status_code == 200
    wait_for(lambda: not host.alive() and len(hosts) == 0, timeout=10)
    wait_for(lambda: not processes_for(Path(router.settings.state_dir)), timeout=10)
    assert clicks(b.text("browser_snapshot")) == 5  # a new host, b's state restored
    a.close()
    done(b)


def test_a_host_that_dies_crashes_each_of_its_sessions_and_each_comes_back(router: RouterThread) -> None:
    a, b = opened(router, 2)
    browse(a, 3)
    browse(b, 4)
    host = worker_of(router, a)
    for client in (a, b):  # saved (debounced after each call): the crash loses nothing
        session = router.manager.sessions.get(client.session_id)
        assert session is not None
        wait_for(lambda s=session: s.state_digest is not None, timeout=10)  # type: ignore[misc]
    os.killpg(host.pgid, signal.SIGKILL)
    wait_for(lambda: state_of(router, a) is State.CRASHED and state_of(router, b) is State.CRASHED, timeout=10)
    assert [clicks(x.text("browser_snapshot")) for x in (a, b)] == [3, 4]
    assert worker_of(router, a) is worker_of(router, b) is not host
    done(a, b)


def test_at_the_live_cap_the_least_recent_session_sleeps(tmp_path: Path) -> None:
    with shared_router(tmp_path, max_live_workers=1) as router:
        a, b, c = opened(router, 3)
        browse(a, 1)
        browse(b, 2)
        browse(c, 3)  # the one host is full: a, the least recent, is hibernated for c
        assert state_of(router, a) is State.HIBERNATED
        assert clicks(a.text("browser_snapshot")) == 1  # and b sleeps for a
        assert state_of(router, b) is State.HIBERNATED
        hosts = router.manager.hosts
        assert hosts is not None and len(hosts) == 1
        done(a, b, c)
    wait_for(lambda: not processes_for(tmp_path), timeout=10)


def test_a_restart_saves_every_hosted_session_and_leaves_nothing_running(tmp_path: Path) -> None:
    with shared_router(tmp_path) as router:
        a, b = opened(router, 2)
        browse(a, 6)
        browse(b, 7)
    assert not processes_for(tmp_path)
    with shared_router(tmp_path) as router:
        for client, expected in ((a, 6), (b, 7)):
            client.url = router.url
            answer = client.text("browser_snapshot")
            assert RESUMED_NOTICE in answer and clicks(answer) == expected
        assert worker_of(router, a) is worker_of(router, b)
        done(a, b)
    wait_for(lambda: not processes_for(tmp_path), timeout=10)


def test_a_session_the_host_forgot_gets_its_last_save_back_in_a_new_context(router: RouterThread) -> None:
    a, b = opened(router, 2)
    browse(a, 4)
    browse(b, 1)
    session = router.manager.sessions.get(a.session_id)
    assert session is not None
    wait_for(lambda: session.state_digest is not None, timeout=10)
    forgotten = forget_worker_session(session)  # a missed ping on the real worker: its context goes
    answer = a.text("browser_snapshot")
    assert session.worker_session_id != forgotten
    assert clicks(answer) == 4 and RESUMED_NOTICE in answer
    assert clicks(b.text("browser_snapshot")) == 1
    done(a, b)


def test_the_resume_reserve_keeps_the_last_host_up_while_a_browsed_session_sleeps(tmp_path: Path) -> None:
    with shared_router(tmp_path, resume_reserve=1) as router:
        (a,) = opened(router, 1)
        browse(a, 2)
        host = worker_of(router, a)
        hosts = router.manager.hosts
        assert hosts is not None
        hosts.idle_timeout = 0.3
        router.manager.upkeep.idle_timeout = 0.3
        wait_for(lambda: state_of(router, a) is State.REAPED, timeout=10)
        with pytest.raises(AssertionError):  # kept: the reaped session is the reserve's demand
            wait_for(lambda: not host.alive(), timeout=1.5)
        router.manager.upkeep.idle_timeout = 600
        answer = a.text("browser_snapshot")
        assert clicks(answer) == 2 and worker_of(router, a) is host  # no spawn for the resume
        done(a)  # DELETE: no sleeping session wants it now
        wait_for(lambda: not host.alive() and len(hosts) == 0, timeout=10)
    wait_for(lambda: not processes_for(tmp_path), timeout=10)


def test_a_session_placed_on_a_host_that_just_died_goes_to_another(router: RouterThread) -> None:
    """The model met it: a host SIGKILLed, and a session placed on it before its exit was handled
    (so it still looked alive) got 502 from the broken handshake. It takes another host now."""
    a, b = opened(router, 2)
    browse(a, 1)
    host = worker_of(router, a)
    hosts = router.manager.hosts
    assert hosts is not None
    supervisor = router.manager.supervisor
    # Its exit not handled yet: the listeners are away, and it still says it is alive.
    listeners = [hosts.worker_exited, router.manager.upkeep._worker_exited]
    for listener in listeners:
        supervisor.remove_exit_listener(listener)
    host.alive = lambda: True  # type: ignore[method-assign]
    try:
        os.killpg(host.pgid, signal.SIGKILL)
        wait_for(lambda: not host._child.alive(), timeout=10)
        browse(b, 2)  # its first call: placed on the dead host first, then on a new one
        assert worker_of(router, b) is not host and clicks(b.text("browser_snapshot")) == 2
    finally:
        for listener in listeners:
            supervisor.add_exit_listener(listener)
    done(a, b)
