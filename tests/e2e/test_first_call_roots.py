"""The first call of a client that declares roots (Claude Code), through a warm worker: the router
asked the client's roots when its GET stream opened, the pool's prepared session made its first
call with those roots (the worker attached it to its browser then), and the client gets that
session and its GET stream, still open, so the worker's pings keep reaching the client."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from router.sessions.roots import ROOTS_METHOD, ROUTER_ID_PREFIX
from tests.e2e.claude_code import ClaudeCodeClient
from tests.support import playwright_router, wait_for

ROOTS_WITHIN: Final = 10.0  # the router asks as soon as the client's GET stream opens
WARMED_WITHIN: Final = 60.0  # a new warm worker: node, Chromium, the prepared session's first call
PINGS_WITHIN: Final = 8.0  # the worker pings every 3 s once a GET stream was open
CALL_LIMIT: Final = 30.0


def roots_questions(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in status["events"] if e["kind"] == "server_request" and e["method"] == ROOTS_METHOD]


def test_a_roots_client_gets_a_session_warmed_with_its_roots(state_dir: Path, chromium: str, pages: str) -> None:
    with playwright_router(state_dir, chromium, warm_workers=1, idle_timeout=600) as router:
        pool = router.manager.pool
        with ClaudeCodeClient(router.url) as teacher:  # the pool learns the client's shape and roots
            teacher.wait_status(lambda s: s["roots_list_answered"] >= 1, ROOTS_WITHIN, "the router's roots/list")
            teacher.call("browser_navigate", timeout=CALL_LIMIT, url=f"{pages}/")
        [warmed] = wait_for(pool.warmed_sessions, timeout=WARMED_WITHIN)

        with ClaudeCodeClient(router.url) as cc:
            before = cc.wait_status(lambda s: s["roots_list_answered"] >= 1, ROOTS_WITHIN, "the router's roots/list")
            text, _ = cc.call("browser_navigate", timeout=CALL_LIMIT, url=f"{pages}/second")
            assert "- Page Title: Second" in text, text
            session = router.manager.sessions.get(cc.session_id)
            assert session is not None and session.worker_session_id == warmed, "not the warmed session"
            # The worker never had to ask this client: its one roots/list came from the router, and
            # was answered before the first call went out.
            asked = roots_questions(cc.status())
            assert [str(e["id"]).startswith(ROUTER_ID_PREFIX) for e in asked] == [True], asked
            assert before["roots_list_answered"] == 1
            # The stream the pool held is the client's now: the worker's pings reach the client.
            pinged = cc.wait_status(lambda s: s["pings_answered"] >= 1, PINGS_WITHIN, "the worker's pings")
            assert pinged["requests_seen"].get("ping@get", 0) >= 1, pinged["requests_seen"]
            again, _ = cc.call("browser_snapshot", timeout=CALL_LIMIT)
            assert "Second" in again
