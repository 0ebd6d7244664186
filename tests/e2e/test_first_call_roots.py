"""The first call of a client that declares roots (Claude Code), through a warm worker: the router
asked the client's roots when its GET stream opened, the pool's prepared session made its first
call with those roots (the worker attached it to its browser then), and the client gets that
session and its GET stream, still open, so the worker's pings keep reaching the client. A client
that declares roots and opens no GET stream is not kept waiting for roots nobody can ask."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import pytest

from router.sessions import prepared_stream
from router.sessions.roots import ROOTS_METHOD, ROUTER_ID_PREFIX
from router.sessions.table import Session
from tests.e2e.claude_code import ClaudeCodeClient
from tests.integration.router.test_session_stream import HeldStream
from tests.integration.router.test_warm_pool import router_loop_call
from tests.support import RawClient, RouterThread, messages_of, playwright_router, text_of, wait_for

ROOTS_WITHIN: Final = 10.0  # the router asks as soon as the client's GET stream opens
WARMED_WITHIN: Final = 60.0  # a new warm worker: node, Chromium, the prepared session's first call
PINGS_WITHIN: Final = 8.0  # the worker pings every 3 s once a GET stream was open
CALL_LIMIT: Final = 30.0
# Long enough that a client cannot pass by waiting it out: the router asks roots only on a GET stream.
LONG_ROOTS_WAIT: Final = 30.0
# Without a GET stream @playwright/mcp waits 5 s for one, asks roots/list into nothing and waits
# 60 s for the answer; a warm worker answers a first navigation in well under a second.
PROMPTLY: Final = 10.0
# The grace a client's GET stream gets to open, made long: the test opens it once the router waits.
LONG_STREAM_GRACE: Final = 30.0
FAST_POKES: Final = 0.2  # the pool's refill loop looks once a second: about a poke a second
POKES_WITHIN: Final = 20.0


@pytest.fixture(scope="module")
def warm_router(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("first-call-roots")
    with playwright_router(state, chromium, warm_workers=1, idle_timeout=600) as router:
        yield router


def teach(router: RouterThread, pages: str) -> dict[str, Any]:
    """A Claude-Code-shaped conversation: the pool learns its shape and roots. Its initialize params."""
    with ClaudeCodeClient(router.url) as teacher:
        teacher.wait_status(lambda s: s["roots_list_answered"] >= 1, ROOTS_WITHIN, "the router's roots/list")
        teacher.call("browser_navigate", timeout=CALL_LIMIT, url=f"{pages}/")
        session = router.manager.sessions.get(teacher.session_id)
        assert session is not None
        return dict(session.initialize_params)


def roots_questions(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in status["events"] if e["kind"] == "server_request" and e["method"] == ROOTS_METHOD]


def test_a_roots_client_gets_a_session_warmed_with_its_roots(warm_router: RouterThread, pages: str) -> None:
    router = warm_router
    pool = router.manager.pool
    teach(router, pages)
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


def test_a_worker_kept_warm_while_it_waits_still_hands_over_its_prepared_session(
    warm_router: RouterThread, pages: str
) -> None:
    """Claude Code comes back to a worker that waited minutes: the pool poked it meanwhile (a
    snapshot on its control session, so its first call is not a cold one). The pokes leave the
    prepared session and its held GET stream alone, and the browser as the warm-up left it: the
    client gets that session, one tab, its page."""
    router = warm_router
    pool = router.manager.pool
    teach(router, pages)
    [warmed] = wait_for(pool.warmed_sessions, timeout=WARMED_WITHIN)
    every = pool.poke_every
    pool.poke_every = FAST_POKES
    try:
        start = pool.pokes
        wait_for(lambda: pool.pokes >= start + 3, timeout=POKES_WITHIN)
    finally:
        pool.poke_every = every
    assert pool.warmed_sessions() == [warmed], "a poke cost the prepared session its stream"
    assert f"mcp_router_warm_pokes_total {float(pool.pokes)}".encode() in router.app.state.metrics.render()

    with ClaudeCodeClient(router.url) as cc:
        cc.wait_status(lambda s: s["roots_list_answered"] >= 1, ROOTS_WITHIN, "the router's roots/list")
        text, _ = cc.call("browser_navigate", timeout=CALL_LIMIT, url=f"{pages}/second")
        assert "- Page Title: Second" in text, text
        session = router.manager.sessions.get(cc.session_id)
        assert session is not None and session.worker_session_id == warmed, "not the warmed session"
        tabs, _ = cc.call("browser_tabs", timeout=CALL_LIMIT, action="list")
        assert tabs.count("- 0:") == 1 and "- 1:" not in tabs and "Second" in tabs, tabs
        cc.wait_status(lambda s: s["pings_answered"] >= 1, PINGS_WITHIN, "the worker's pings")


def test_a_roots_client_without_a_get_stream_is_answered_at_once(warm_router: RouterThread, pages: str) -> None:
    """Claude Code's shape, but no GET stream ever: the warm worker's prepared session is not
    waited for (no stream to ask the roots on), and the worker's own roots/list, which it asks
    only on a GET stream, is answered by the stream the router holds for the client."""
    router = warm_router
    router.manager.continuity.roots_wait = LONG_ROOTS_WAIT
    params = teach(router, pages)
    wait_for(router.manager.pool.warmed_sessions, timeout=WARMED_WITHIN)
    with RawClient(router.url) as raw:
        response = raw.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        assert response.status_code == 200, response.text
        raw.session_id = response.headers["mcp-session-id"]
        assert raw.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        started = time.monotonic()
        answer = raw.call("browser_navigate", url=f"{pages}/second")
        took = time.monotonic() - started
        assert "- Page Title: Second" in text_of(answer), answer
        assert took < PROMPTLY, f"the first call took {took:.1f}s"
        session = router.manager.sessions.get(raw.session_id)
        assert session is not None and session.adopted_stream is not None, "no stream held for the client"
        # The next call goes to the same worker session: it was not closed for an unanswered ping.
        worker_session = session.worker_session_id
        response = raw.post({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                             "params": {"name": "browser_snapshot", "arguments": {}}})  # fmt: skip
        asked = [m for m in messages_of(response) if "method" in m]
        assert not asked, f"the worker asked a client that has no GET stream: {asked}"
        assert "Second" in text_of(messages_of(response)[-1])
        assert session.worker_session_id == worker_session


def test_a_resume_gives_a_reopening_get_stream_its_grace(
    warm_router: RouterThread, pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation in Claude Code's shape comes back (after a hibernation) while its GET
    stream is away, reopening (as after a router restart). The warm worker's prepared session
    is not its (no stream to hand it over on), so the handshake is replayed, and the client's
    stream is given its grace before the router holds one with no roots for it: the worker's
    roots/list reaches the client, which answers with its own roots."""
    router = warm_router
    params = teach(router, pages)
    with RawClient(router.url) as raw:
        response = raw.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        assert response.status_code == 200, response.text
        raw.session_id = response.headers["mcp-session-id"]
        assert raw.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        assert "- Page Title: Second" in text_of(raw.call("browser_navigate", url=f"{pages}/second"))
        session: Session | None = router.manager.sessions.get(raw.session_id)
        assert session is not None
        router_loop_call(router, router.manager.hibernate(session))
        wait_for(router.manager.pool.warmed_sessions, timeout=WARMED_WITHIN)

        waiting = threading.Event()
        grace = prepared_stream.wait_for_stream

        async def spied(waited_for: Session) -> bool:
            waiting.set()
            return await grace(waited_for)

        monkeypatch.setattr(prepared_stream, "STREAM_GRACE", LONG_STREAM_GRACE)
        monkeypatch.setattr(prepared_stream, "wait_for_stream", spied)
        with ThreadPoolExecutor(1) as resume:
            answer = resume.submit(raw.call, "browser_snapshot")
            wait_for(lambda: waiting.is_set() or answer.done(), timeout=CALL_LIMIT)
            stream = HeldStream(raw.url, raw.session_id, "cc").start()  # the client's, reopened
            assert "Second" in text_of(answer.result(timeout=CALL_LIMIT))
        assert stream.asked, "the worker's roots/list was answered for the client, with no roots"
        wait_for(lambda: stream.answer_statuses == [202] * len(stream.asked), timeout=ROOTS_WITHIN)
        assert raw.delete().status_code == 200
        stream.join()
