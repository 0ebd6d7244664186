"""A Claude-Code-shaped conversation paused past the router's idle timeout: its worker reaped, the
resume reserve ready with a warm worker prepared in the client's shape, and the next call (the old
ref's click) carried on on the same page with the same cookies, the new worker's roots/list and
pings crossing the client's stream. One conversation, two at once, two with memory short, and a
tab's second document. And a worker that forgot the conversation's MCP session under two calls.
The client and the steps: tests/e2e/claude_code.py, cc_steps.py."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import pytest

from tests.e2e.cc_steps import (
    ANSWER_WITHIN,
    CALL_LIMIT,
    PINGS_WITHIN,
    REAP_IDLE,
    RESERVE_READY,
    WORKER_GONE,
    carries_on,
    pause_all,
    sign_in,
    wait_worker_gone,
    worker_of,
)
from tests.e2e.claude_code import ClaudeCodeClient
from tests.integration.router.test_worker_session_reopen import REOPENED, HeldReopens, forget_worker_session
from tests.support import (
    RouterThread,
    playwright_router,
    wait_for,
)
from workers.orphans import processes_for

# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reaping(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    """A router that reaps a worker after REAP_IDLE seconds without client requests."""
    # As users run it: the resume reserve on (one by default; two here, for the two conversations
    # that come back at once), so a conversation's call after a pause takes a browser already up.
    state = tmp_path_factory.mktemp("cc-reap")
    with playwright_router(state, chromium, idle_timeout=REAP_IDLE, resume_reserve=2) as router:
        yield router


# -- after a pause past the idle timeout -----------------------------------------------------------


def test_pause_past_the_idle_timeout_then_click_the_old_ref(reaping: RouterThread, pages: str) -> None:
    with ClaudeCodeClient(reaping.url) as cc:
        before = sign_in(cc, pages, "pause")
        # The pause: no client request until the router has reaped the worker.
        wait_worker_gone(reaping, cc.session_id, worker_of(reaping, cc.session_id))
        # The turn's calls are in router.db by the time the worker is gone, read around the
        # router (which would flush first).
        db = reaping.settings.state_dir / "router.db"
        with closing(sqlite3.connect(db)) as conn:
            tools = conn.execute(
                "SELECT q.tool, p.status FROM requests q JOIN responses p USING (ref_id)"
                " WHERE q.session_id = ? AND q.method = 'tools/call' ORDER BY q.ts",
                (cc.session_id,),
            ).fetchall()
        assert tools == [("browser_navigate", "success"), ("browser_snapshot", "success")], tools
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
        befores = pause_all(reaping, pair, pages, "together")
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


def test_with_memory_short_the_reserve_ends_its_workers_and_both_still_resume(
    reaping: RouterThread, pages: str
) -> None:
    """Two conversations asleep, the reserve at two warm workers; then free memory falls under
    the floor: the reserve ends both (their process trees gone), and both conversations still
    carry on, each on a worker of its own."""
    pool = reaping.manager.pool
    state = reaping.settings.state_dir
    spare, short = pool.spare_memory, pool.memory_short
    with ClaudeCodeClient(reaping.url) as first, ClaudeCodeClient(reaping.url) as second:
        pair = (first, second)
        befores = pause_all(reaping, pair, pages, "short")
        warm = wait_for(lambda: (lambda ids: ids if len(ids) >= 2 else None)(pool.ready_ids()),
                        timeout=2 * RESERVE_READY)  # fmt: skip
        try:
            pool.spare_memory, pool.memory_short = (lambda: False), (lambda: True)
            wait_for(lambda: not pool.ready_ids(), timeout=WORKER_GONE)
            wait_for(lambda: not any(processes_for(state, w) for w in warm), timeout=WORKER_GONE)
            for cc, before in zip(pair, befores, strict=True):
                carries_on(cc, before, reaping)
                assert worker_of(reaping, cc.session_id) == cc.session_id  # spawned, not a warm one
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


# -- the worker forgot the client's session ---------------------------------------------------------


@pytest.mark.parametrize("together", [True, False], ids=["404s-together", "second-404-after-the-reopen"])
def test_two_calls_after_the_worker_lost_the_session_share_one_new_one(
    reaping: RouterThread,
    pages: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    together: bool,
) -> None:
    """The worker ended the client's MCP session (as after a ping unanswered while the client's
    stream was away) but lives on; two calls both get its 404 (held until both have, then let
    on together or one after the other's reopen): the router opens one new worker session for
    both, the client's stream follows it, and that session's roots/list reaches the client, so
    neither call waits out the worker's minute for the answer."""
    monkeypatch.setattr(reaping.manager.upkeep, "idle_timeout", 60.0)  # a reap would take the resume path
    with ClaudeCodeClient(reaping.url) as cc:
        before = sign_in(cc, pages, f"lost{int(together)}")
        session = reaping.manager.sessions.get(cc.session_id)
        assert session is not None
        connection = session.connection
        forgotten = forget_worker_session(session)
        held = HeldReopens(reaping.manager.requests, 2, one_after_another=not together)
        monkeypatch.setattr(reaping.manager.requests, "reopen_worker_session", held)
        with caplog.at_level(logging.INFO, logger="mcp_router.continuity"), ThreadPoolExecutor(2) as both:
            answers = list(
                both.map(lambda _: cc.call_raw("browser_tabs", {"action": "list"}, timeout=CALL_LIMIT), range(2))
            )
        assert held.arrived == 2, "both calls got the worker's 404"
        for answer in answers:
            assert not answer["is_error"] and "### Error" not in answer["text"], answer["text"]
            assert answer["seconds"] <= ANSWER_WITHIN, f"a call took {answer['seconds']:.1f}s"
        assert caplog.text.count(REOPENED) == 1, caplog.text
        assert session.connection is connection and session.worker_session_id != forgotten
        cc.wait_status(
            lambda s: s["roots_list_answered"] > before.roots,
            timeout=PINGS_WITHIN,
            what="the new worker session's roots/list answered through the client's stream",
        )
