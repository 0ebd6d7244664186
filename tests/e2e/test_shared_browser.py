"""Sessions sharing one browser (``--sessions-per-browser``): each its own context of one
``@playwright/mcp --isolated`` worker, through the router, with real Chromium."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.sessions.resume_notice import NOTICE_PREFIX as RESUMED_NOTICE
from router.sessions.table import State
from tests.support import RawClient, RouterThread, wait_for, wait_saved
from tests.support.routers import playwright_router
from workers.orphans import processes_for

HOST_CAPACITY = 3
SHARED_IDLE_TIMEOUT = 600.0  # tests reap on purpose, by lowering it for a moment


@pytest.fixture(scope="module")
def shared_router(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("shared-router")
    with playwright_router(
        state, chromium, idle_timeout=SHARED_IDLE_TIMEOUT, sessions_per_browser=HOST_CAPACITY, max_live_workers=2
    ) as router:
        yield router


@pytest.fixture
def clients(shared_router: RouterThread) -> Iterator[list[RawClient]]:
    opened: list[RawClient] = []
    try:
        for _ in range(2):
            c = RawClient(shared_router.url)
            c.__enter__()
            opened.append(c)
            c.initialize()
        yield opened
    finally:
        for c in opened:
            try:
                c.delete()
            finally:
                c.__exit__(None, None, None)


def host_ids(router: RouterThread) -> set[str]:
    hosts = router.manager.hosts
    assert hosts is not None
    return {h.id for h in hosts.all()}


def state_of(router: RouterThread, client: RawClient) -> State | None:
    session = router.manager.sessions.get(client.session_id)
    return None if session is None else session.state


def reap(router: RouterThread, client: RawClient) -> None:
    upkeep = router.manager.upkeep
    idle, upkeep.idle_timeout = upkeep.idle_timeout, 0.5
    try:
        wait_for(lambda: state_of(router, client) is State.REAPED, timeout=15)
    finally:
        upkeep.idle_timeout = idle


def test_two_sessions_share_one_worker_and_see_nothing_of_each_other(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    a, b = clients
    assert "set a1" in a.text("browser_navigate", url=f"{pages}/set?v=a1")
    assert "cookie=none storage=none" in b.text("browser_navigate", url=f"{pages}/get")
    b.text("browser_navigate", url=f"{pages}/set?v=b1")
    assert "cookie=a1 storage=a1" in a.text("browser_navigate", url=f"{pages}/get")
    # One worker process for both: the host.
    manager = shared_router.manager
    a_worker = manager.sessions.get(a.session_id).connection.worker  # type: ignore[union-attr]
    b_worker = manager.sessions.get(b.session_id).connection.worker  # type: ignore[union-attr]
    assert a_worker is b_worker and a_worker.session_id in host_ids(shared_router)
    assert not processes_for(Path(shared_router.settings.state_dir), a.session_id)


def test_a_reaped_session_resumes_in_a_new_context_on_the_host(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    a, b = clients
    a.text("browser_navigate", url=f"{pages}/set?v=r1")
    a.text("browser_navigate", url=f"{pages}/second")
    b.text("browser_navigate", url=f"{pages}/second")
    wait_saved(Path(shared_router.settings.state_dir), a, "r1", "/second")
    hosts_before = host_ids(shared_router)
    reap(shared_router, a)
    started = time.monotonic()
    snapshot = a.text("browser_snapshot")
    resumed_s = time.monotonic() - started
    assert RESUMED_NOTICE in snapshot and f"- Page URL: {pages}/second" in snapshot
    assert "cookie=r1 storage=r1" in a.text("browser_navigate", url=f"{pages}/get")
    assert host_ids(shared_router) == hosts_before  # no worker started for it
    assert resumed_s < 10, resumed_s
