"""A page that crashes under a live worker (its renderer killed, as the OOM killer would), in a
conversation shaped like Claude Code's (roots, the GET stream held, no DELETE). Playwright MCP
puts a blank tab in its place and tells only the MCP session that met it: the router's own, as
often as the client's. The router ends the worker as a crash, its state saved with the page put
back, and the call that met the crash, and every one after it, is answered from the page brought
back, with the same cookie and the old ref. Before, the client met Playwright's error or
about:blank with nothing said, and a save taken then kept the blank tab for the next resume. The
browser being fine, the worker is restarted without the restart budget's backoff (counted all
the same: a page that crashes on every load degrades its session as a crashing worker would).
(The signs, and the save's part, with stand-ins: tests/unit/continuity/test_page_crash.py.)
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Final

import pytest

from router.sessions.page_crash import TARGET_CRASHED
from tests.e2e.cc_steps import (
    CALL_LIMIT,
    WORKER_GONE,
    base_of,
    carries_on,
    hibernate,
    saved,
    signed_in_and_saved,
    worker_pid,
)
from tests.e2e.claude_code import ClaudeCodeClient
from tests.support import RouterThread, dead, playwright_router, renderers_of, wait_for
from workers.browser import find_browser

CRASH_BACKOFF: Final = 10 * CALL_LIMIT  # a worker's or browser's crash would wait this long


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    """A router that does not reap during a test, and whose restart backoff outlasts a call: the
    browser is fine after a page crash, so its worker is restarted without one."""
    with playwright_router(
        tmp_path_factory.mktemp("page-crash"), chromium, idle_timeout=600, resume_reserve=1,
        restart_backoff=[CRASH_BACKOFF],
    ) as r:  # fmt: skip
        yield r


def _crash_the_page(router: RouterThread, session_id: str) -> int:
    """Kills the renderers of the session's browser (its one page's); the worker's pid."""
    node = worker_pid(base_of(router), session_id)
    assert node is not None
    browser = find_browser(node)
    assert browser is not None, "no browser under the worker after its first tool calls"
    renderers = renderers_of(browser)
    assert renderers, "no renderer under the worker's browser"
    for pid in renderers:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: all(dead(pid) for pid in renderers), timeout=WORKER_GONE)
    assert find_browser(node) == browser  # the browser lives on: only the page is gone
    return node


def test_the_call_that_meets_a_crashed_page_is_answered_from_the_page_brought_back(
    router: RouterThread, pages: str
) -> None:
    """Playwright's answer to it (its error, the crash not known to it yet, or the blank tab it
    opened instead) is not passed on: the call ran on no page of the client's, so it goes once
    more, to the worker resumed with the page."""
    with ClaudeCodeClient(router.url) as cc:
        # Saved: nothing of the router's own is pending on the worker, so the client meets it.
        before = signed_in_and_saved(cc, router, pages, "renderer")
        node = _crash_the_page(router, cc.session_id)
        met = str(cc.call_raw("browser_snapshot", {}, timeout=CALL_LIMIT)["text"])
        assert f"- Page URL: {before.url}" in met and TARGET_CRASHED not in met, met
        assert "restored after" in met and "crashed" in met, met  # and told why
        assert worker_pid(base_of(router), cc.session_id) not in (None, node)
        session = router.manager.sessions.get(cc.session_id)
        assert session is not None and session.budget.recent == 1
        carries_on(cc, before, router)
        assert not saved(router.settings.state_dir, cc.session_id, '"about:blank"')


def test_a_page_that_crashed_before_a_hibernation_comes_back_with_the_resume(router: RouterThread, pages: str) -> None:
    """The save before the worker goes is the call that meets the crash: it keeps the page."""
    state = router.settings.state_dir
    with ClaudeCodeClient(router.url) as cc:
        before = signed_in_and_saved(cc, router, pages, "sleeper")
        _crash_the_page(router, cc.session_id)
        hibernate(router, cc.session_id)
        assert saved(state, cc.session_id, before.url) and not saved(state, cc.session_id, '"about:blank"')
        carries_on(cc, before, router)
