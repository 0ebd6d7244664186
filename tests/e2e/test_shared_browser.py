"""Sessions sharing one browser (``--sessions-per-browser``): each its own context of one
``@playwright/mcp --isolated`` worker, through the router, with real Chromium."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from router.sessions.resume_notice import NOTICE_PREFIX as RESUMED_NOTICE
from router.sessions.table import State
from router.types import H_CONVERSATION
from tests.support import RawClient, RouterThread, wait_for, wait_saved
from tests.support.auth import TEST_TOKEN, auth_headers
from tests.support.client import ACCEPT_BOTH, initialize_body
from tests.support.procs import renderers_of
from tests.support.routers import playwright_router
from workers.browser import find_browser
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
    session = shared_router.manager.sessions.get(a.session_id)
    assert session is not None and session.connection is not None
    host, old = session.connection, session.worker_session_id
    reap(shared_router, a)
    # Its MCP session on the host goes once its state is saved, and its context with it
    # (test_isolated_upstream.py: a DELETE closes that session's context only); the host and b's
    # live on.
    def old_session_status() -> int:
        return httpx.post(
            host.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10, trust_env=False,
            headers={"host": host.host_header, "mcp-session-id": str(old), "accept": ACCEPT_BOTH},
        ).status_code  # fmt: skip

    wait_for(lambda: old_session_status() == 404, timeout=15)
    assert host.worker.alive() and "/second" in b.text("browser_snapshot")
    started = time.monotonic()
    snapshot = a.text("browser_snapshot")
    resumed_s = time.monotonic() - started
    assert RESUMED_NOTICE in snapshot and f"- Page URL: {pages}/second" in snapshot
    assert "cookie=r1 storage=r1" in a.text("browser_navigate", url=f"{pages}/get")
    assert host_ids(shared_router) == hosts_before  # no worker started for it
    assert resumed_s < 10, resumed_s


def test_tabs_session_storage_and_console_stay_in_their_session(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    a, b = clients
    a.text("browser_navigate", url=f"{pages}/second")
    a.call("browser_tabs", action="new")
    a.text("browser_navigate", url=f"{pages}/red")
    a.text("browser_evaluate", function="() => { sessionStorage.setItem('s', 'a-secret'); console.log('a-said'); }")
    b.text("browser_navigate", url=f"{pages}/red")
    b_tabs = b.text("browser_tabs", action="list")
    assert f"{pages}/second" not in b_tabs and b_tabs.count("\n- ") == 1, b_tabs  # A's two tabs are not B's
    refused = b.call("browser_tabs", action="select", index=1)
    assert refused["result"].get("isError") is True or "### Error" in str(refused)
    assert "null" in b.text("browser_evaluate", function="() => sessionStorage.getItem('s')")
    assert "a-said" not in b.text("browser_console_messages")
    b.call("browser_tabs", action="close", index=0)
    assert "/second" in a.text("browser_tabs", action="list")  # A's tabs untouched by B's close
    assert "a-secret" in a.text("browser_evaluate", function="() => sessionStorage.getItem('s')")


def test_browser_close_and_delete_end_only_their_own_context(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    a, b = clients
    a.text("browser_navigate", url=f"{pages}/set?v=c1")
    b.text("browser_navigate", url=f"{pages}/set?v=c2")
    host = shared_router.manager.sessions.get(a.session_id).connection.worker  # type: ignore[union-attr]
    b.call("browser_close")
    assert "cookie=c1 storage=c1" in a.text("browser_navigate", url=f"{pages}/get")
    assert b.delete().status_code == 200
    assert "cookie=c1 storage=c1" in a.text("browser_navigate", url=f"{pages}/get")
    assert host.alive() and shared_router.manager.sessions.get(a.session_id).connection.worker is host  # type: ignore[union-attr]


def test_a_new_browser_is_a_fresh_context_on_a_host(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    a, b = clients
    a.text("browser_navigate", url=f"{pages}/set?v=n1")
    b.text("browser_navigate", url=f"{pages}/set?v=n2")
    assert "browser" in a.text("create_new_session").lower()
    assert "cookie=none storage=none" in a.text("browser_navigate", url=f"{pages}/get")
    assert "cookie=n2 storage=n2" in b.text("browser_navigate", url=f"{pages}/get")


def test_router_calls_on_a_clients_session_are_not_its_calls(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    """Saves and restores run on the client's own MCP session on the host: the record shows only
    the client's calls."""
    a, _ = clients
    a.text("browser_navigate", url=f"{pages}/set?v=rec")
    wait_saved(Path(shared_router.settings.state_dir), a, "rec")
    reap(shared_router, a)
    assert RESUMED_NOTICE in a.text("browser_snapshot")
    db = Path(shared_router.settings.state_dir) / "router.db"

    def tools() -> list[str]:
        rows = sqlite3.connect(db).execute(
            "SELECT tool FROM requests WHERE session_id = ? AND method = 'tools/call' ORDER BY ts", (a.session_id,)
        ).fetchall()
        return [r[0] for r in rows]

    wait_for(lambda: tools() == ["browser_navigate", "browser_snapshot"], timeout=10)


def test_a_host_that_dies_brings_each_of_its_sessions_back(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    a, b = clients
    a.text("browser_navigate", url=f"{pages}/set?v=k1")
    b.text("browser_navigate", url=f"{pages}/set?v=k2")
    a.text("browser_navigate", url=f"{pages}/second")
    state = Path(shared_router.settings.state_dir)
    wait_saved(state, a, "k1", "/second")
    wait_saved(state, b, "k2")
    host = shared_router.manager.sessions.get(a.session_id).connection.worker  # type: ignore[union-attr]
    os.killpg(host.pgid, signal.SIGKILL)
    wait_for(lambda: state_of(shared_router, a) is State.CRASHED and state_of(shared_router, b) is State.CRASHED,
             timeout=15)  # fmt: skip
    snapshot = a.text("browser_snapshot")
    assert RESUMED_NOTICE in snapshot and f"- Page URL: {pages}/second" in snapshot
    assert "cookie=k2 storage=k2" in b.text("browser_navigate", url=f"{pages}/get")
    assert "cookie=k1 storage=k1" in a.text("browser_navigate", url=f"{pages}/get")


def test_an_empty_host_ends_after_the_idle_timeout(shared_router: RouterThread, pages: str) -> None:
    hosts = shared_router.manager.hosts
    assert hosts is not None
    with RawClient(shared_router.url) as c:
        c.initialize()
        c.text("browser_navigate", url=f"{pages}/second")
        worker = shared_router.manager.sessions.get(c.session_id).connection.worker  # type: ignore[union-attr]
        idle, hosts.idle_timeout = hosts.idle_timeout, 0.5
        try:
            assert c.delete().status_code == 200
            wait_for(lambda: not worker.alive() and worker.session_id not in {h.id for h in hosts.all()}, timeout=15)
        finally:
            hosts.idle_timeout = idle
    wait_for(lambda: not processes_for(Path(shared_router.settings.state_dir), worker.session_id), timeout=10)


def test_a_conversation_gets_its_browser_back_in_the_shared_mode(shared_router: RouterThread, pages: str) -> None:
    def opened(key: str) -> RawClient:
        client = RawClient(shared_router.url)
        response = client.post(initialize_body(), **{H_CONVERSATION: key})
        assert response.status_code == 200, response.text
        client.session_id = response.headers["mcp-session-id"]
        assert client.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        return client

    with opened("shared-conversation") as first:
        first.text("browser_navigate", url=f"{pages}/set?v=conv")
        first.text("browser_navigate", url=f"{pages}/second")
        assert first.delete().status_code == 200
    with opened("shared-conversation") as second:
        snapshot = second.text("browser_snapshot")
        assert "conversation resumed" in snapshot and f"- Page URL: {pages}/second" in snapshot
        assert "cookie=conv storage=conv" in second.text("browser_navigate", url=f"{pages}/get")
        second.delete()
    with opened("another-conversation") as other:
        assert "cookie=none storage=none" in other.text("browser_navigate", url=f"{pages}/get")
        other.delete()


def test_the_api_shows_which_host_carries_which_session(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    a, b = clients
    a.text("browser_navigate", url=f"{pages}/second")
    b.text("browser_navigate", url=f"{pages}/second")
    body = httpx.get(f"{shared_router.base_url}/api/sessions", headers=auth_headers(TEST_TOKEN), timeout=10).json()
    rows = {r["id"]: r for r in body["sessions"]}
    host = rows[a.session_id]["host"]
    assert host and rows[b.session_id]["host"] == host and rows[a.session_id]["memory_bytes"] is None
    listed = {h["id"]: h for h in body["hosts"]}
    assert listed[host]["sessions"] >= 2 and listed[host]["pss_bytes"] > 100 * 2**20
    assert listed[host]["capacity_left"] == HOST_CAPACITY - listed[host]["sessions"]
    assert body["sessions_per_browser"] == HOST_CAPACITY


def test_at_the_live_cap_the_least_recent_session_sleeps_to_make_room(
    tmp_path: Path, chromium: str, pages: str
) -> None:
    with (
        playwright_router(tmp_path, chromium, idle_timeout=600, sessions_per_browser=2, max_live_workers=1) as router,
        RawClient(router.url) as a, RawClient(router.url) as b, RawClient(router.url) as c,
    ):  # fmt: skip
        for client in (a, b, c):
            client.initialize()
        a.text("browser_navigate", url=f"{pages}/set?v=cap")
        wait_saved(tmp_path, a, "cap")
        b.text("browser_navigate", url=f"{pages}/second")
        c.text("browser_navigate", url=f"{pages}/second")  # the host is full: a (least recent) sleeps
        assert state_of(router, a) is State.HIBERNATED
        hosts = router.manager.hosts
        assert hosts is not None and len(hosts) == 1
        assert "cookie=cap storage=cap" in a.text("browser_navigate", url=f"{pages}/get")  # b sleeps now
        assert state_of(router, b) is State.HIBERNATED
        for client in (a, b, c):
            client.delete()


def test_one_pages_crash_touches_only_its_own_session(
    shared_router: RouterThread, clients: list[RawClient], pages: str
) -> None:
    a, b = clients
    b.text("browser_navigate", url=f"{pages}/set?v=calm")
    host = shared_router.manager.sessions.get(b.session_id).connection.worker  # type: ignore[union-attr]
    browser = find_browser(host.pid)
    assert browser is not None
    others = set(renderers_of(browser))
    a.text("browser_navigate", url=f"{pages}/set?v=boom")
    a.text("browser_navigate", url=f"{pages}/second")
    wait_saved(Path(shared_router.settings.state_dir), a, "boom", "/second")
    a_pages = set(renderers_of(browser)) - others  # a's page (and any spare Chromium keeps)
    assert a_pages
    for pid in a_pages:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    met = a.text("browser_snapshot")
    assert f"- Page URL: {pages}/second" in met and "crashed" in met, met
    assert "cookie=boom storage=boom" in a.text("browser_navigate", url=f"{pages}/get")
    calm = b.text("browser_navigate", url=f"{pages}/get")
    assert "cookie=calm storage=calm" in calm and RESUMED_NOTICE not in calm
    assert find_browser(host.pid) == browser  # one browser throughout: only a's context was redone
