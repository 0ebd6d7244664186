"""Conversations the way Claude Code lives them, with a client shaped like it (tests/e2e/claude_code.py):
roots and elicitation declared, its GET stream always open and reopened ~1 s after it ends,
roots/list and pings answered, never a DELETE. Whatever happens to the session's worker (idle
reap, kill -9, hibernation, a router restart, create_new_session), the next call answers within
a few seconds, on the same page with the same cookies, and the new worker's pings and roots/list
reach the client through its stream. Handshakes alone never start a worker. (After an idle reap:
test_claude_code_resumes.py; the steps both take: cc_steps.py.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from router.http.tool_policy import DANGEROUS_TOOLS
from router.sessions import upkeep
from tests.e2e.cc_steps import (
    ANSWER_WITHIN,
    CALL_LIMIT,
    PINGS_WITHIN,
    WORKER_GONE,
    base_of,
    carries_on,
    hibernate,
    saved,
    sign_in,
    signed_in_and_saved,
    worker_of,
    worker_pid,
)
from tests.e2e.claude_code import (
    ROUTER_TOOLS,
    ClaudeCodeClient,
    ClientError,
    DirectWorker,
)
from tests.support import (
    REF_KEY,
    RawClient,
    RouterThread,
    auth_headers,
    dead,
    messages_of,
    playwright_router,
    serve_process,
    spare_port,
    wait_for,
)
from tests.support.saved import SAVE_WAIT
from workers.browser import find_browser
from workers.orphans import processes_for

CC_CAPABILITIES: Final = {"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}}
CC_PROTOCOL: Final = "2025-11-25"
RESUMING_CALL_S: Final = 5  # a browser_wait_for: long enough to kill the browser under it
HANDSHAKES: Final = 20
HANDSHAKE_P50: Final = 4.0  # loose (the goal is 250 ms, benched); a worker per handshake takes ~7 s unloaded


# -- fixtures --------------------------------------------------------------------------------------


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


# -- after every other kind of change of worker ----------------------------------------------------


@pytest.mark.parametrize("racing", [False, True], ids=["noticed", "racing"])
def test_worker_kill_9_then_call(steady: RouterThread, pages: str, racing: bool) -> None:
    # Racing, the call is sent the moment the worker's group is killed: it may find the port
    # refused, or a kept-alive socket that the dying node resets while its listener still accepts
    # (pinned with the stand-in worker in tests/integration/continuity/test_supervision.py).
    with ClaudeCodeClient(steady.url) as cc:
        before = signed_in_and_saved(cc, steady, pages, "kill")
        pid = worker_pid(base_of(steady), cc.session_id)
        assert pid is not None
        if racing:
            os.killpg(pid, signal.SIGKILL)  # node leads its own process group
        else:
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: dead(pid), timeout=WORKER_GONE)
            # Once the router has noticed (as it would during any pause): the call does not race the crash.
            wait_for(lambda: worker_pid(base_of(steady), cc.session_id) != pid, timeout=WORKER_GONE)
        carries_on(cc, before, steady)
        assert worker_pid(base_of(steady), cc.session_id) not in (None, pid)


def test_browser_killed_under_a_live_worker_then_call(steady: RouterThread, pages: str) -> None:
    """Chromium dies (the OOM killer's usual pick) while node lives: Playwright would answer the
    next call from a new browser on about:blank, without cookies or refs. The router restarts the
    worker at once instead, and the next call carries on as after any crash."""
    restarts = steady.manager.browsers.restarts
    with ClaudeCodeClient(steady.url) as cc:
        before = signed_in_and_saved(cc, steady, pages, "oom")
        node = worker_pid(base_of(steady), cc.session_id)
        assert node is not None
        browser = find_browser(node)
        assert browser is not None, "no browser under the worker after its first tool calls"
        os.kill(browser, signal.SIGKILL)
        wait_for(lambda: worker_pid(base_of(steady), cc.session_id) != node, timeout=WORKER_GONE)
        assert steady.manager.browsers.restarts == restarts + 1
        carries_on(cc, before, steady)
        resumed = worker_pid(base_of(steady), cc.session_id)
        assert resumed not in (None, node)
        relaunched = find_browser(resumed)
        assert relaunched is not None
        os.kill(relaunched, signal.SIGKILL)  # the resumed worker's browser is watched too
        wait_for(lambda: worker_pid(base_of(steady), cc.session_id) != resumed, timeout=WORKER_GONE)
        assert steady.manager.browsers.restarts == restarts + 2
        text, _ = cc.call("browser_snapshot", timeout=CALL_LIMIT)
        assert f"- Page URL: {before.url}" in text and "crashed" in text, text  # reloaded, and told so
        cookies, _ = cc.call("browser_evaluate", timeout=CALL_LIMIT, function="() => document.cookie")
        assert "session=oom" in cookies, cookies


def test_browser_killed_during_the_call_that_resumed_the_session(steady: RouterThread, pages: str) -> None:
    """The resume's restore launched the browser, which dies while the call that brought the
    session back still runs: watched from the restore on (not from that call's end), it ends the
    worker as any other browser's death, so the next call carries on on the page."""
    restarts = steady.manager.browsers.restarts
    with ClaudeCodeClient(steady.url) as cc:
        before = signed_in_and_saved(cc, steady, pages, "gap")
        hibernate(steady, cc.session_id)
        with ThreadPoolExecutor(max_workers=1) as pool:
            resuming = pool.submit(cc.call_raw, "browser_wait_for", {"time": RESUMING_CALL_S}, timeout=CALL_LIMIT)
            # The session has a worker again once its restore is done: the call runs from then on.
            node = wait_for(lambda: worker_pid(base_of(steady), cc.session_id), timeout=WORKER_GONE)
            browser = wait_for(lambda: find_browser(node), timeout=WORKER_GONE)
            os.kill(browser, signal.SIGKILL)
            wait_for(lambda: worker_pid(base_of(steady), cc.session_id) != node, timeout=WORKER_GONE)
            with contextlib.suppress(ClientError):  # a call in flight when the browser died fails
                resuming.result(timeout=CALL_LIMIT)  # but is answered, not left hanging
        assert steady.manager.browsers.restarts == restarts + 1
        carries_on(cc, before, steady)


def test_hibernation_then_call(steady: RouterThread, pages: str) -> None:
    with ClaudeCodeClient(steady.url) as cc:
        before = sign_in(cc, pages, "hib")
        hibernate(steady, cc.session_id)
        carries_on(cc, before, steady)


def test_a_save_after_a_call_that_changed_nothing_writes_nothing(
    steady: RouterThread, pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "SAVE_MIN_INTERVAL", 0.5)  # the router runs in this process
    state = steady.settings.state_dir
    saver = steady.manager.continuity.state_saver
    with ClaudeCodeClient(steady.url) as cc:
        signed_in_and_saved(cc, steady, pages, "still")
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
    port = spare_port()
    url = f"http://127.0.0.1:{port}/mcp"
    quiet = ("--log-level", "warning")
    with serve_process(state_dir, *quiet, port=port, browser=chromium) as first, ClaudeCodeClient(url) as cc:
        before = sign_in(cc, pages, "restart")
        wait_for(lambda: saved(state_dir, cc.session_id, "restart"), timeout=SAVE_WAIT)
        # Killed right after the last call's answer: its rows were committed before it left.
        last = cc.call_raw("browser_tabs", {"action": "list"})
        first.proc.kill()  # SIGKILL: no saving, no ending of workers, no goodbye to held streams
        first.proc.wait(timeout=10)
        last_ref = str(last["result"]["_meta"][REF_KEY])
        cc.wait_status(lambda s: not s["get_stream_open"], timeout=10, what="the GET stream broken")
        opens = cc.status()["get_opens"]  # before the new router: the client may reopen at once
        with serve_process(state_dir, *quiet, port=port, browser=chromium) as second:
            # The client reopens its GET stream on the same id, as Claude Code does.
            cc.wait_status(lambda s: s["get_opens"] > opens, timeout=10, what="the GET stream reopened")
            try:
                carries_on(cc, before)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nrouter stderr: {second.stderr()}") from None
            # The call answered before the kill is in the record of the new run.
            with sqlite3.connect(state_dir / "router.db") as conn:
                rows = conn.execute(
                    "SELECT q.tool, p.status FROM requests q JOIN responses p USING (ref_id) WHERE ref_id = ?",
                    (last_ref,),
                ).fetchall()
            assert rows == [("browser_tabs", "success")], rows


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
