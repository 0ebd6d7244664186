"""A session outlives its worker: reaping, kill -9 and the live-worker cap, with real workers."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from router.sessions.resume_notice import NOTICE_PREFIX as RESUMED_NOTICE
from router.sessions.table import State
from tests.support import RawClient, RouterThread, find_ref, messages_of, router_settings, wait_for, wait_saved
from workers.orphans import processes_for

CALL_SECONDS = 20  # the in-flight call's own length: far longer than any error may take
IN_WORKER_WITHIN = 15.0
# The goal is under a second (the worker's exit is noticed at once; scripts/bench measures it);
# this bound only tells "answered by the death" from "answered when the call ended", under load.
ERROR_WITHIN = 10.0
RESUME_WITHIN = 20.0  # a browser launched and its state restored, on a loaded 2-core machine


def session_state(router: RouterThread, client: RawClient) -> State | None:
    session = router.manager.sessions.get(client.session_id)
    return None if session is None else session.state


def worker_pgid(router: RouterThread, client: RawClient) -> int:
    worker = router.manager.supervisor.get(client.session_id)
    assert worker is not None
    return int(worker.pgid)


@pytest.fixture
def client(pw_router: RouterThread) -> Iterator[RawClient]:
    with RawClient(pw_router.url) as c:
        c.initialize()
        yield c
        c.delete()


def reap(router: RouterThread, client: RawClient) -> None:
    """The client's session reaped for idling, its worker gone."""
    idle_timeout, router.manager.upkeep.idle_timeout = router.manager.upkeep.idle_timeout, 0.5
    try:
        wait_for(lambda: session_state(router, client) is State.REAPED, timeout=15)
    finally:
        router.manager.upkeep.idle_timeout = idle_timeout
    wait_for(lambda: not processes_for(router.settings.state_dir, client.session_id), timeout=10)


def test_cookie_and_url_survive_reaping(pw_router: RouterThread, client: RawClient, pages: str) -> None:
    state = pw_router.settings.state_dir
    assert "set r1" in client.text("browser_navigate", url=f"{pages}/set?v=r1")
    client.text("browser_navigate", url=f"{pages}/second")
    wait_saved(state, client, "r1", "/second")
    reap(pw_router, client)

    started = time.monotonic()
    snapshot = client.text("browser_snapshot")
    resume_s = time.monotonic() - started
    assert f"- Page URL: {pages}/second" in snapshot
    assert "This is the second page" in snapshot
    assert RESUMED_NOTICE in snapshot
    assert resume_s < RESUME_WITHIN, f"the resume took {resume_s:.1f}s"
    # The notice comes once; the session cookie (no expiry) and localStorage came back.
    after = client.text("browser_navigate", url=f"{pages}/get")
    assert RESUMED_NOTICE not in after
    assert "cookie=r1 storage=r1" in after


def test_the_current_page_sees_its_storage_on_its_first_load_after_the_resume(
    pw_router: RouterThread, client: RawClient, pages: str
) -> None:
    # /loads logs what localStorage held as each of its loads began; the second navigation gives
    # its refs a frame prefix (f1e2), which the resume must reproduce along with the storage.
    client.text("browser_navigate", url=f"{pages}/set?v=ls1")
    client.text("browser_navigate", url=f"{pages}/loads")
    before = client.text("browser_snapshot")
    assert "loads: ls1;" in before
    ref = find_ref(before, "Again")
    assert ref.startswith("f1")
    wait_saved(pw_router.settings.state_dir, client, "ls1", "/loads")
    reap(pw_router, client)
    # Resumed with a fresh profile, as on a reserve worker: only the restore brings storage back.
    shutil.rmtree(pw_router.manager.layout.profile_dir(client.session_id))

    snapshot = client.text("browser_snapshot")
    assert RESUMED_NOTICE in snapshot
    loads = re.findall(r"loads: ([^\s\"]*)", snapshot)
    assert loads and set(loads[0].rstrip(";").split(";")) == {"ls1"}, snapshot
    assert find_ref(snapshot, "Again") == ref


SNAPSHOT_LINK = re.compile(r"\[Snapshot\]\(([^)\s]+)\)")


def test_a_ref_read_from_a_navigations_snapshot_file_clicks_after_the_resume(
    pw_router: RouterThread, client: RawClient, pages: str
) -> None:
    """A navigation's answer links its snapshot (a file), as Claude Code reads it: the refs there
    carry the tab's frame prefix, which the resume must reproduce without a browser_snapshot."""
    client.text("browser_navigate", url=f"{pages}/set?v=nav")
    answer = client.text("browser_navigate", url=f"{pages}/loads")
    link = SNAPSHOT_LINK.search(answer)
    assert link, f"the navigation's answer links no snapshot file:\n{answer}"
    ref = find_ref(Path(link.group(1)).read_text(), "Again")
    assert ref.startswith("f1"), ref
    wait_saved(pw_router.settings.state_dir, client, "nav", "/loads")
    reap(pw_router, client)

    clicked = client.text("browser_click", target=ref, element="Again button")
    assert RESUMED_NOTICE in clicked
    assert "### Error" not in clicked, clicked


def test_a_page_that_moves_during_a_read_only_call_is_saved(
    pw_router: RouterThread, client: RawClient, pages: str
) -> None:
    # browser_wait_for changes nothing itself (readOnlyHint), but the page signed in and moved
    # meanwhile: what a crash would otherwise lose is saved.
    state = pw_router.settings.state_dir
    client.text("browser_navigate", url=f"{pages}/later")
    wait_saved(state, client, "/later")  # the navigation's save, before the page moves
    waited = client.text("browser_wait_for", time=6)
    assert f"- Page URL: {pages}/second" in waited
    wait_saved(state, client, "moved42", "/second")


def test_cookie_and_url_survive_kill_9_of_the_worker(pw_router: RouterThread, client: RawClient, pages: str) -> None:
    state = pw_router.settings.state_dir
    client.text("browser_navigate", url=f"{pages}/set?v=k9")
    wait_saved(state, client, "k9")
    os.killpg(worker_pgid(pw_router, client), signal.SIGKILL)
    wait_for(lambda: session_state(pw_router, client) is State.CRASHED, timeout=10)

    snapshot = client.text("browser_snapshot")
    assert f"- Page URL: {pages}/set?v=k9" in snapshot
    assert "cookie=k9 storage=k9" in client.text("browser_navigate", url=f"{pages}/get")
    assert session_state(pw_router, client) is State.LIVE


def test_in_flight_call_gets_an_error_within_a_second_when_the_worker_dies(
    pw_router: RouterThread, client: RawClient, pages: str
) -> None:
    client.text("browser_navigate", url=f"{pages}/")
    answer: dict[str, Any] = {}
    streaming = threading.Event()
    call = {"jsonrpc": "2.0", "id": 77, "method": "tools/call",
            "params": {"name": "browser_wait_for", "arguments": {"time": CALL_SECONDS}}}  # fmt: skip

    def long_call() -> None:
        body = json.dumps(call).encode()
        with client.http.stream("POST", client.url, content=body, headers=client.headers()) as response:
            # The router starts the client's stream only once the worker has the call.
            streaming.set()
            response.read()
        answer["at"] = time.monotonic()
        answer["status"] = response.status_code
        answer["errors"] = [m.get("error") for m in messages_of(response) if m.get("id") == 77]

    thread = threading.Thread(target=long_call)
    thread.start()
    assert streaming.wait(timeout=IN_WORKER_WITHIN), "the call's stream did not start"
    killed_at = time.monotonic()
    os.killpg(worker_pgid(pw_router, client), signal.SIGKILL)
    thread.join(timeout=ERROR_WITHIN)
    assert not thread.is_alive(), "the in-flight call hung"
    # The death, not the call's own end (CALL_SECONDS), answered it.
    assert answer["at"] - killed_at < ERROR_WITHIN
    assert answer["status"] == 200, answer  # an error event on the call's stream
    assert [e and e["code"] for e in answer["errors"]] == [-32603], answer
    # ... and the session carries on.
    assert "- Page URL:" in client.text("browser_snapshot")


def test_lru_idle_session_is_hibernated_and_resumes_with_its_state(
    state_dir: Path, chromium: str, pages: str
) -> None:
    state = state_dir
    settings = router_settings(state, worker_command=None, browser=chromium, max_live_workers=1)
    with RouterThread(settings) as router, RawClient(router.url) as a, RawClient(router.url) as b:
        a.initialize()
        a.text("browser_navigate", url=f"{pages}/set?v=lru-a")
        wait_saved(state, a, "lru-a")
        b.initialize()  # answered by the router: no worker yet, so a keeps its own
        assert session_state(router, a) is State.LIVE
        # The cap is one live worker: b's first call hibernates a to make room.
        b.text("browser_navigate", url=f"{pages}/set?v=lru-b")
        assert session_state(router, a) is State.HIBERNATED
        assert not processes_for(state, a.session_id)
        wait_saved(state, b, "lru-b")

        snapshot = a.text("browser_snapshot")  # now b makes room for a
        assert f"- Page URL: {pages}/set?v=lru-a" in snapshot
        assert session_state(router, b) is State.HIBERNATED
        assert "cookie=lru-a storage=lru-a" in a.text("browser_navigate", url=f"{pages}/get")
        assert "cookie=lru-b storage=lru-b" in b.text("browser_navigate", url=f"{pages}/get")
        assert a.delete().status_code == 200
        assert b.delete().status_code == 200
        assert a.delete().status_code == 404
