"""Conversations the way Claude Code lives them, with a client shaped like it (tests/e2e/claude_code.py):
roots and elicitation declared, its GET stream always open and reopened ~1 s after it ends,
roots/list and pings answered, never a DELETE. Whatever happens to the session's worker (idle
reap, kill -9, hibernation, a router restart, create_new_session), the next call answers within
a few seconds, on the same page with the same cookies, and the new worker's pings and roots/list
reach the client through its stream. Handshakes alone never start a worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from router.http.tool_policy import DANGEROUS_TOOLS
from router.operator.api import ACTION_HEADER
from router.sessions import upkeep
from tests.e2e.claude_code import (
    ROUTER_TOOLS,
    ClaudeCodeClient,
    DirectWorker,
)
from tests.support import (
    RawClient,
    RouterThread,
    auth_headers,
    free_port,
    messages_of,
    playwright_router,
    serve_process,
    wait_for,
)
from workers.orphans import processes_for

CC_CAPABILITIES: Final = {"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}}
CC_PROTOCOL: Final = "2025-11-25"
# The target for the first call after any change of worker is 5 s; scripts/bench measures
# that. Here the bound only tells a resume from a stall (Claude Code saw 66 s): on a loaded 2-core
# CI machine a healthy resume took 5.6-6.5 s, so a tight bound made the suite flaky, not stricter.
ANSWER_WITHIN: Final = 20.0
CALL_LIMIT: Final = 30.0  # past this the call is failed outright (above ANSWER_WITHIN, below the stall)
PINGS_WITHIN: Final = 15.0  # the worker pings every 3 s once its GET stream is open; slack for load
WORKER_GONE: Final = 20.0
SAVE_WAIT: Final = 20.0  # as tests/support/saved.py: the first save is debounced, then every 5 s at most
# Seconds: the reaping router's idle timeout. Past the worker's 3-s ping period: a resumed worker's
# next ping may come up to 3 s after the client's last call, and at 2 s the session was at times
# reaped again before it (as scripts/bench found for its own reaping router).
REAP_IDLE: Final = 4.0
RESERVE_READY: Final = 40.0  # a reserve worker spawned and its browser launched, on a loaded machine
HANDSHAKES: Final = 20
HANDSHAKE_P50: Final = 4.0  # loose (the goal is 250 ms, benched); a worker per handshake takes ~7 s unloaded
REF_RE: Final = re.compile(r"\[ref=([a-z0-9]+)\]")


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reaping(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    """A router that reaps a worker after REAP_IDLE seconds without client requests."""
    # As users run it: the resume reserve on (the default), so a conversation's call after a
    # pause takes a browser that is already up.
    state = tmp_path_factory.mktemp("cc-reap")
    with playwright_router(state, chromium, idle_timeout=REAP_IDLE, resume_reserve=2) as router:
        yield router


@pytest.fixture(scope="module")
def steady(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    """A router that does not reap during a test: kills, hibernation and new browsers are ours."""
    state = tmp_path_factory.mktemp("cc-steady")
    with playwright_router(state, chromium, idle_timeout=600, resume_reserve=1) as router:
        yield router


@pytest.fixture(scope="module")
def direct(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[DirectWorker]:
    """Playwright MCP alone, as a user would run it: the parity reference."""
    with DirectWorker(tmp_path_factory.mktemp("cc-direct"), chromium) as worker:
        yield worker


# -- the conversation's steps ----------------------------------------------------------------------


@dataclass(frozen=True)
class Before:
    """What the model holds before the pause, and the client's counters then."""

    tag: str
    ref: str
    url: str
    session_id: str
    pings: int
    roots: int


def find_ref(snapshot: str, label: str) -> str:
    for line in snapshot.splitlines():
        if label in line:
            match = REF_RE.search(line)
            if match:
                return match.group(1)
    raise AssertionError(f"no ref for {label!r} in:\n{snapshot}")


def sign_in(cc: ClaudeCodeClient, pages: str, tag: str) -> Before:
    """One navigation to the app (which sets a session cookie), a snapshot for the button's ref,
    and the worker's first roots/list answered through the client's stream."""
    text, _ = cc.call("browser_navigate", url=f"{pages}/app?login={tag}")
    assert f"- Page URL: {pages}/app" in text, text
    snapshot, _ = cc.call("browser_snapshot")
    ref = find_ref(snapshot, 'button "Continue"')
    status = cc.wait_status(
        lambda s: s["roots_list_answered"] >= 1,
        timeout=PINGS_WITHIN,
        what="the worker's roots/list (asked at the first tool call) answered before the pause",
    )
    return Before(tag, ref, f"{pages}/app", cc.session_id, status["pings_answered"], status["roots_list_answered"])


def carries_on(cc: ClaudeCodeClient, before: Before, router: RouterThread | None = None) -> None:
    """The first call after the change: the old ref clicks within ANSWER_WITHIN seconds, on the
    same page with the same session cookie, and the new worker's roots/list and pings cross.
    A warm worker's session may have had the client's roots from the router already (``router``
    tells): that worker does not ask."""
    answer = cc.call_raw("browser_click", {"target": before.ref, "element": "Continue button"}, timeout=CALL_LIMIT)
    text, seconds = str(answer["text"]), float(answer["seconds"])
    assert not answer["is_error"] and "### Error" not in text, f"the click on {before.ref} failed: {text}"
    assert seconds <= ANSWER_WITHIN, f"the first call after the pause took {seconds:.1f}s"
    assert f"- Page URL: {before.url}" in text, text
    after_call = cc.status()
    snapshot, _ = cc.call("browser_snapshot", timeout=CALL_LIMIT)
    assert f"continued with session={before.tag}" in snapshot, f"the click did not reach the page:\n{snapshot}"
    cookies, _ = cc.call("browser_evaluate", timeout=CALL_LIMIT, function="() => document.cookie")
    assert f"session={before.tag}" in cookies, cookies
    cc.wait_status(
        lambda s: s["roots_list_answered"] > before.roots or worker_has_roots(router, before.session_id),
        timeout=PINGS_WITHIN,
        what="the new worker's roots/list answered through the client's stream",
    )
    cc.wait_status(
        lambda s: s["pings_answered"] > after_call["pings_answered"],
        timeout=PINGS_WITHIN,
        what=f"pings from the new worker within {PINGS_WITHIN:.0f} s of the resume",
    )
    final = cc.status()
    assert final["session_id"] == before.session_id
    assert final["deletes"] == 0


def worker_has_roots(router: RouterThread | None, session_id: str) -> bool:
    """The session's worker took the client's roots from the router (router/sessions/roots.py)."""
    session = router.manager.sessions.get(session_id) if router is not None else None
    return session is not None and session.worker_has_roots


def worker_pid(base: str, session_id: str) -> int | None:
    """The session's worker as the operator API shows it (None: it has none now)."""
    response = httpx.get(f"{base}/api/sessions/{session_id}", headers=auth_headers(), timeout=10, trust_env=False)
    assert response.status_code == 200, response.text
    pid = response.json()["session"]["worker_pid"]
    assert pid is None or isinstance(pid, int), response.text
    return pid


def dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def saved(state_dir: Path, session_id: str, needle: str) -> bool:
    """The session's saved browser state holds ``needle``: what survives a kill."""
    try:
        return needle in (state_dir / "sessions" / session_id / "state.json").read_text()
    except OSError:
        return False


def worker_of(router: RouterThread, session_id: str) -> str:
    """The id the session's worker runs under: its own, or that of the warm worker it took."""
    session = router.manager.sessions.get(session_id)
    assert session is not None and session.connection is not None, "the session has no worker"
    return session.connection.worker.session_id


def wait_worker_gone(router: RouterThread, session_id: str, worker: str) -> None:
    """The pause: until the session is dormant and no process of its worker is left."""
    session = router.manager.sessions.get(session_id)
    assert session is not None
    state = router.settings.state_dir
    wait_for(lambda: session.connection is None and not processes_for(state, worker), timeout=WORKER_GONE)


def pause_all(router: RouterThread, clients: tuple[ClaudeCodeClient, ...]) -> None:
    """The pause of several conversations: until each is dormant and its worker gone (the workers
    read first: one conversation may be reaped while the wait is on another)."""
    workers = [worker_of(router, cc.session_id) for cc in clients]
    for cc, worker in zip(clients, workers, strict=True):
        wait_worker_gone(router, cc.session_id, worker)


def base_of(router: RouterThread) -> str:
    return router.url.removesuffix("/mcp")


# -- the harness itself, against Playwright MCP alone ----------------------------------------------


def test_harness_against_a_direct_worker(direct: DirectWorker, pages: str) -> None:
    """The client's counters and refs mean what the router tests take them to mean."""
    with ClaudeCodeClient(direct.url) as cc:
        assert cc.ready["protocol_version"] == CC_PROTOCOL
        assert 400 <= cc.ready["discover_status"] < 500
        before = sign_in(cc, pages, "direct")
        status = cc.status()
        assert status["requests_seen"].get("roots/list@get", 0) >= 1, status["requests_seen"]
        assert status["get_stream_open"] and status["get_last_event_ids_sent"] == 0
        text, seconds = cc.call("browser_click", target=before.ref, element="Continue button")
        assert "### Error" not in text and seconds < ANSWER_WITHIN, text
        snapshot, _ = cc.call("browser_snapshot")
        assert "continued with session=direct" in snapshot
        cookies, _ = cc.call("browser_evaluate", function="() => document.cookie")
        assert "session=direct" in cookies, cookies
        stale, _ = cc.call("browser_click", target="e999", element="nothing")
        assert "not found in the current page snapshot" in stale  # what an unknown ref gets
        pings = cc.status()["pings_answered"]
        cc.wait_status(lambda s: s["pings_answered"] > pings, timeout=PINGS_WITHIN, what="pings keep coming")
        assert cc.quit()["deletes"] == 0


# -- after every kind of change of worker ----------------------------------------------------------


def test_pause_past_the_idle_timeout_then_click_the_old_ref(reaping: RouterThread, pages: str) -> None:
    with ClaudeCodeClient(reaping.url) as cc:
        before = sign_in(cc, pages, "pause")
        # The pause: no client request until the router has reaped the worker.
        wait_worker_gone(reaping, cc.session_id, worker_of(reaping, cc.session_id))
        # Meanwhile the resume reserve readied a worker with an MCP session opened in this
        # client's shape, whose first call was made with the roots the router had from the client.
        session = reaping.manager.sessions.get(cc.session_id)
        assert session is not None
        pool = reaping.manager.pool
        prepared = wait_for(lambda: pool.prepared_sessions(session.initialize_params), timeout=RESERVE_READY)
        carries_on(cc, before, reaping)  # the worker's own roots/list and pings reach the client's stream
        # A resume takes the reserve's worker with its prepared session and held stream: nothing
        # is replayed, and the worker does not ask the client's roots again (Continuity.attach).
        assert session.worker_session_id in prepared, "the resume replayed the handshake"
        assert session.worker_has_roots


def test_two_conversations_back_at_once_each_take_a_warm_worker(reaping: RouterThread, pages: str) -> None:
    """Both paused past the idle timeout, both click their old refs at the same moment: each
    takes one of the reserve's warm workers with its prepared session (restores queued, no
    handshake replayed), and each carries on with its cookie, page and pings."""
    with ClaudeCodeClient(reaping.url) as first, ClaudeCodeClient(reaping.url) as second:
        pair = (first, second)
        befores = [sign_in(cc, pages, f"together{k}") for k, cc in enumerate(pair)]
        pause_all(reaping, pair)
        session = reaping.manager.sessions.get(first.session_id)
        assert session is not None
        pool = reaping.manager.pool
        prepared = wait_for(
            lambda: (lambda ids: ids if len(ids) >= 2 else None)(pool.prepared_sessions(session.initialize_params)),
            timeout=2 * RESERVE_READY,
        )
        with ThreadPoolExecutor(2) as together:
            list(together.map(lambda both: carries_on(both[0], both[1], reaping), zip(pair, befores, strict=True)))
        for cc in pair:
            resumed = reaping.manager.sessions.get(cc.session_id)
            assert resumed is not None and resumed.worker_session_id in prepared
            assert resumed.worker_has_roots


def test_with_memory_short_the_reserve_ends_its_extra_worker_and_both_still_resume(
    reaping: RouterThread, pages: str
) -> None:
    """Two conversations asleep, the reserve at two warm workers; then free memory falls under
    the floor: the reserve ends one (its process tree gone) and keeps the first, and both
    conversations still carry on, one on the warm worker, the other on a worker of its own."""
    pool = reaping.manager.pool
    state = reaping.settings.state_dir
    spare, short = pool.spare_memory, pool.memory_short
    with ClaudeCodeClient(reaping.url) as first, ClaudeCodeClient(reaping.url) as second:
        pair = (first, second)
        befores = [sign_in(cc, pages, f"short{k}") for k, cc in enumerate(pair)]
        pause_all(reaping, pair)
        warm = wait_for(lambda: (lambda ids: ids if len(ids) >= 2 else None)(pool.ready_ids()),
                        timeout=2 * RESERVE_READY)  # fmt: skip
        try:
            pool.spare_memory, pool.memory_short = (lambda: False), (lambda: True)
            kept = wait_for(lambda: (lambda ids: ids if len(ids) == 1 else None)(pool.ready_ids()),
                            timeout=WORKER_GONE)  # fmt: skip
            ended = [w for w in warm if w not in kept]
            assert ended and set(kept) <= set(warm)
            wait_for(lambda: not any(processes_for(state, w) for w in ended), timeout=WORKER_GONE)
            for cc, before in zip(pair, befores, strict=True):
                carries_on(cc, before, reaping)
        finally:
            pool.spare_memory, pool.memory_short = spare, short


def test_pause_after_a_second_navigation_then_click_the_old_ref(reaping: RouterThread, pages: str) -> None:
    """Real conversations navigate more than once; a tab's later documents number their refs
    with a frame prefix (f1e3), which a freshly restored page does not reproduce by itself."""
    with ClaudeCodeClient(reaping.url) as cc:
        cc.call("browser_navigate", url=f"{pages}/second")
        before = sign_in(cc, pages, "renav")
        wait_worker_gone(reaping, cc.session_id, worker_of(reaping, cc.session_id))
        carries_on(cc, before, reaping)


def test_worker_kill_9_then_call(steady: RouterThread, pages: str) -> None:
    state = steady.settings.state_dir
    with ClaudeCodeClient(steady.url) as cc:
        before = sign_in(cc, pages, "kill")
        wait_for(lambda: saved(state, cc.session_id, "kill"), timeout=SAVE_WAIT)
        pid = worker_pid(base_of(steady), cc.session_id)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: dead(pid), timeout=WORKER_GONE)
        # Once the router has noticed (as it would during any pause): the call does not race the crash.
        wait_for(lambda: worker_pid(base_of(steady), cc.session_id) != pid, timeout=WORKER_GONE)
        carries_on(cc, before, steady)


def test_hibernation_then_call(steady: RouterThread, pages: str) -> None:
    with ClaudeCodeClient(steady.url) as cc:
        before = sign_in(cc, pages, "hib")
        worker = worker_of(steady, cc.session_id)
        response = httpx.post(
            f"{base_of(steady)}/api/sessions/{cc.session_id}/hibernate",
            headers={ACTION_HEADER: "1", **auth_headers()},
            timeout=30,
            trust_env=False,
        )
        assert response.status_code == 200, response.text
        wait_worker_gone(steady, cc.session_id, worker)
        carries_on(cc, before, steady)


def test_a_save_after_a_call_that_changed_nothing_writes_nothing(
    steady: RouterThread, pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "SAVE_MIN_INTERVAL", 0.5)  # the router runs in this process
    state = steady.settings.state_dir
    saver = steady.manager.continuity.state_saver
    with ClaudeCodeClient(steady.url) as cc:
        sign_in(cc, pages, "still")
        wait_for(lambda: saved(state, cc.session_id, "still"), timeout=SAVE_WAIT)
        state_file = state / "sessions" / cc.session_id / "state.json"
        written, unchanged, before = saver.written, saver.unchanged, state_file.read_bytes()
        cc.call("browser_press_key", key="Shift")  # not read-only, so a save follows; it changes nothing
        wait_for(lambda: saver.unchanged > unchanged, timeout=SAVE_WAIT)
        assert saver.written == written and state_file.read_bytes() == before  # not even its save time
        cc.call("browser_evaluate", function="() => localStorage.setItem('kept', 'yes')")
        wait_for(lambda: saver.written > written, timeout=SAVE_WAIT)
        assert saved(state, cc.session_id, '"kept"')
    metrics = httpx.get(f"{base_of(steady)}/metrics", headers=auth_headers(), timeout=10, trust_env=False).text
    assert f'mcp_router_state_saves_total{{outcome="unchanged"}} {float(saver.unchanged)}' in metrics, metrics


def test_router_sigkill_and_restart_then_call(state_dir: Path, chromium: str, pages: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    quiet = ("--log-level", "warning")
    with serve_process(state_dir, *quiet, port=port, browser=chromium) as first, ClaudeCodeClient(url) as cc:
        before = sign_in(cc, pages, "restart")
        wait_for(lambda: saved(state_dir, cc.session_id, "restart"), timeout=SAVE_WAIT)
        first.proc.kill()  # SIGKILL: no saving, no ending of workers, no goodbye to held streams
        first.proc.wait(timeout=10)
        cc.wait_status(lambda s: not s["get_stream_open"], timeout=10, what="the GET stream broken")
        opens = cc.status()["get_opens"]  # before the new router: the client may reopen at once
        with serve_process(state_dir, *quiet, port=port, browser=chromium) as second:
            # The client reopens its GET stream on the same id, as Claude Code does.
            cc.wait_status(lambda s: s["get_opens"] > opens, timeout=10, what="the GET stream reopened")
            try:
                carries_on(cc, before)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nrouter stderr: {second.stderr()}") from None


def test_create_new_session_then_call(steady: RouterThread, pages: str) -> None:
    with ClaudeCodeClient(steady.url) as cc:
        before = sign_in(cc, pages, "old")
        text, _ = cc.call("create_new_session", timeout=CALL_LIMIT)
        assert "### Error" not in text, text
        after_renew = cc.status()
        answer = cc.call_raw("browser_navigate", {"url": f"{pages}/app"}, timeout=CALL_LIMIT)
        assert not answer["is_error"] and "### Error" not in answer["text"], answer["text"]
        assert answer["seconds"] <= ANSWER_WITHIN, f"the first call in the new browser took {answer['seconds']:.1f}s"
        cookies, _ = cc.call("browser_evaluate", timeout=CALL_LIMIT, function="() => document.cookie")
        assert "session=old" not in cookies, f"the new browser kept the old one's cookie: {cookies}"
        after_call = cc.status()
        cc.wait_status(
            lambda s: s["roots_list_answered"] > max(before.roots, after_renew["roots_list_answered"]),
            timeout=PINGS_WITHIN,
            what="the new browser's roots/list answered through the client's stream",
        )
        cc.wait_status(
            lambda s: s["pings_answered"] > after_call["pings_answered"],
            timeout=PINGS_WITHIN,
            what="pings from the new browser's worker",
        )
        assert cc.status()["session_id"] == before.session_id


# -- lazy start: handshakes alone never start a worker ---------------------------------------------


def test_handshake_only_leaves_no_worker_and_the_first_call_starts_one(steady: RouterThread, pages: str) -> None:
    state = steady.settings.state_dir
    with ClaudeCodeClient(steady.url) as cc:
        sid = cc.session_id
        assert processes_for(state, sid) == [], "initialize started a worker"
        cc.list_tools()
        assert processes_for(state, sid) == [], "tools/list started a worker"
        cc.wait_status(lambda s: s["get_stream_open"], timeout=5, what="the GET stream open")
        assert processes_for(state, sid) == [], "the GET stream started a worker"
        # The first call that needs a browser starts the worker, which gets the client's handshake.
        text, _ = cc.call("browser_navigate", timeout=CALL_LIMIT, url=f"{pages}/second")
        assert "- Page Title: Second" in text, text
        assert processes_for(state, worker_of(steady, sid)), "no worker after a browser call"
        cc.wait_status(lambda s: s["roots_list_answered"] >= 1, timeout=PINGS_WITHIN, what="roots/list answered")

    with ClaudeCodeClient(steady.url) as health_check:  # what `claude mcp list` does
        sid = health_check.session_id
        health_check.list_tools()
        assert health_check.quit()["deletes"] == 0
    assert processes_for(state, sid) == [], "a health check left a worker"


def test_tools_list_is_the_workers_plus_the_routers_own(steady: RouterThread, direct: DirectWorker) -> None:
    """Byte for byte the user's Playwright MCP, apart from the router's own tools; the storage
    capability the router adds for itself stays hidden, and so do the tools that run arbitrary
    code unless the user allows them (router/http/tool_policy.py)."""
    with ClaudeCodeClient(direct.url) as cc:
        expected = [t for t in cc.list_tools() if t["name"] not in DANGEROUS_TOOLS]
    with ClaudeCodeClient(steady.url) as cc:
        listed = cc.list_tools()
    names = [t["name"] for t in listed]
    assert set(names) >= ROUTER_TOOLS, names
    worker_tools = [t for t in listed if t["name"] not in ROUTER_TOOLS]
    hidden = sorted({t["name"] for t in worker_tools} - {t["name"] for t in expected})
    assert not hidden, f"tools the user did not configure are listed: {hidden}"
    assert json.dumps(worker_tools, sort_keys=False) == json.dumps(expected, sort_keys=False)


def _handshake(url: str) -> tuple[str, float]:
    with RawClient(url) as c:
        body: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": CC_PROTOCOL,
                "capabilities": CC_CAPABILITIES,
                "clientInfo": {"name": "claude-code", "version": "2.1.328"},
            },
        }
        started = time.monotonic()
        response = c.post(body)
        took = time.monotonic() - started
        assert response.status_code == 200, response.text
        assert messages_of(response)[-1]["result"]["protocolVersion"] == CC_PROTOCOL
        c.session_id = response.headers["mcp-session-id"]
        assert c.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        assert c.request("tools/list")["result"]["tools"]
        return c.session_id, took


def test_twenty_concurrent_handshakes_leave_no_worker(steady: RouterThread) -> None:
    state = steady.settings.state_dir
    with ThreadPoolExecutor(max_workers=HANDSHAKES) as pool:
        results = list(pool.map(_handshake, [steady.url] * HANDSHAKES))
    took = sorted(t for _, t in results)
    with_workers = [sid for sid, _ in results if processes_for(state, sid)]
    assert not with_workers, f"{len(with_workers)} of {HANDSHAKES} handshakes started a worker"
    p50 = statistics.median(took)
    assert p50 <= HANDSHAKE_P50, f"initialize p50 {p50 * 1000:.0f} ms over {HANDSHAKES} at once: {took}"
