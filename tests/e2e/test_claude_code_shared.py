"""Claude Code's shape (roots declared, its GET stream held, never a DELETE, pauses past the
idle timeout) with sessions sharing a browser (``--sessions-per-browser``): a conversation paused
past the idle timeout loses its context, not its browser; the next call clicks its old ref on the
host that is still up, the new MCP session's roots/list and pings crossing the client's stream.
With every conversation paused, the host ends too, and each comes back on a new one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cc_steps import REAP_IDLE, WORKER_GONE, carries_on, sign_in
from tests.e2e.claude_code import ClaudeCodeClient
from tests.support import RouterThread, playwright_router, wait_for
from workers.orphans import processes_for


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("cc-shared")
    with playwright_router(state, chromium, idle_timeout=REAP_IDLE, sessions_per_browser=4) as router:
        yield router


def dormant(router: RouterThread, session_id: str) -> bool:
    session = router.manager.sessions.get(session_id)
    return session is not None and session.connection is None


def test_a_paused_conversation_resumes_on_the_host_another_keeps_up(shared: RouterThread, pages: str) -> None:
    with ClaudeCodeClient(shared.url) as paused, ClaudeCodeClient(shared.url) as busy:
        before = sign_in(paused, pages, "hostpause")
        busy.call("browser_navigate", url=f"{pages}/second")
        host = shared.manager.sessions.get(paused.session_id).connection.worker  # type: ignore[union-attr]
        # The pause, while busy keeps calling: the host stays up.
        wait_for(lambda: busy.call("browser_snapshot") and dormant(shared, paused.session_id), timeout=WORKER_GONE)
        assert host.alive()
        carries_on(paused, before, shared)
        assert shared.manager.sessions.get(paused.session_id).connection.worker is host  # type: ignore[union-attr]


def test_every_conversation_paused_ends_the_host_and_each_comes_back(shared: RouterThread, pages: str) -> None:
    with ClaudeCodeClient(shared.url) as one, ClaudeCodeClient(shared.url) as two:
        befores = [sign_in(one, pages, "allpause1"), sign_in(two, pages, "allpause2")]
        host = shared.manager.sessions.get(one.session_id).connection.worker  # type: ignore[union-attr]
        state = shared.settings.state_dir
        wait_for(lambda: not processes_for(state, host.session_id), timeout=WORKER_GONE + REAP_IDLE)
        assert dormant(shared, one.session_id) and dormant(shared, two.session_id)
        carries_on(one, befores[0], shared)
        carries_on(two, befores[1], shared)
