"""The warm pool with the real worker: the client's first tool call lands in the browser the pool
launched before the client's initialize, not in a new one; so does a resume's."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from router.sessions.table import State
from tests.support import RawClient, RouterThread, router_settings, wait_for, wait_saved
from workers.orphans import processes_for


def browser_pids(state_dir: Path, session_id: str) -> set[int]:
    """Chromium main processes (not zygotes or renderers) of one worker."""
    found = set()
    for pid in processes_for(state_dir, session_id):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        # Zygote children rewrite their argv into one space-separated string: look at the bytes.
        program = cmdline.split(b"\0")[0].split(b" ")[0]
        if b"chrom" in program and b"crashpad" not in program and b"--type=" not in cmdline:
            found.add(pid)
    return found


def timed_text(client: RawClient, tool: str, **arguments: str) -> tuple[str, float]:
    started = time.perf_counter()
    text = client.text(tool, **arguments)
    return text, time.perf_counter() - started


def test_first_tool_call_lands_in_the_prelaunched_browser(state_dir: Path, chromium: str, pages: str) -> None:
    state = state_dir
    settings = router_settings(state, worker_command=None, browser=chromium, warm_workers=1)
    with RouterThread(settings) as router, RawClient(router.url) as client:
        [pooled] = wait_for(lambda: router.manager.pool.ready_ids(), timeout=40)
        launched = browser_pids(state, pooled)
        assert len(launched) == 1, "the pool launches the browser before any client shows up"

        client.initialize()
        assert client.session_id != pooled  # the pooled worker keeps its own id (and port)
        text, first = timed_text(client, "browser_navigate", url=f"{pages}/")
        assert "Router test page" in text or "- Page Title: Home" in text
        # The same browser process serves it, and no other browser was started for the session.
        assert browser_pids(state, pooled) == launched
        # The navigate reused the pool's about:blank tab: one tab, ours.
        tabs = client.text("browser_tabs", action="list")
        assert tabs.count("- 0:") == 1 and "- 1:" not in tabs, tabs

        steady = statistics.median(timed_text(client, "browser_navigate", url=f"{pages}/?n={k}")[1] for k in range(3))
        # A browser launch costs 0.5-1 s here; allow generous scheduling noise on a loaded machine.
        assert first < 3 * steady + 0.3, f"first {first * 1000:.0f} ms vs steady {steady * 1000:.0f} ms"
        assert client.delete().status_code == 200


def test_a_resume_takes_a_warm_worker_and_brings_the_page_back(state_dir: Path, chromium: str, pages: str) -> None:
    settings = router_settings(state_dir, worker_command=None, browser=chromium, warm_workers=1, idle_timeout=600)
    with RouterThread(settings) as router, RawClient(router.url) as client:
        client.initialize()
        client.text("browser_navigate", url=f"{pages}/set?v=warm")
        wait_saved(state_dir, client, "warm")
        [warm] = wait_for(lambda: router.manager.pool.ready_ids(), timeout=40)
        launched = browser_pids(state_dir, warm)
        router.manager.idle_timeout = 0.5
        wait_for(lambda: router.manager.sessions.get(client.session_id).state is State.REAPED, timeout=15)
        router.manager.idle_timeout = 600
        text = client.text("browser_navigate", url=f"{pages}/get")
        assert "cookie=warm storage=warm" in text  # restored into the warm worker's browser
        assert browser_pids(state_dir, warm) == launched  # no new browser was launched for it
        assert client.delete().status_code == 200
        wait_for(lambda: not processes_for(state_dir, warm), timeout=10)
        assert not (state_dir / "sessions" / warm).exists()
