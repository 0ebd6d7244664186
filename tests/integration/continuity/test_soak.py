"""Sessions opened and abandoned without DELETE under a short idle timeout, with the stand-in worker:
200 in the suite, 1,000 (or any number) with `scripts/continuity soak [--sessions N]`."""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from router.sessions.table import DORMANT
from tests.support import STANDIN_WORKER_COMMAND, RawClient, RouterThread, router_settings, wait_for
from workers.orphans import processes_for

# The suite runs 200; `scripts/continuity soak` sets this to 1,000 (~2 min on 2 cores).
SESSIONS = int(os.environ.get("MCP_ROUTER_SOAK_SESSIONS", "200"))
RSS_GROWTH_LIMIT = 150 * 1024 * 1024  # the router keeps ~1 KiB per dormant session, not MiBs


def _rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _abandon(url: str) -> str:
    with RawClient(url) as c:
        c.initialize()
        assert c.text("echo", text="hi") == "hi"
        return c.session_id or ""  # ... and never DELETEd, like Claude Code


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_abandoned_sessions_leave_no_orphans_and_a_consistent_record(state_dir: Path) -> None:
    settings = router_settings(
        state_dir, worker_command=STANDIN_WORKER_COMMAND, idle_timeout=0.3, max_live_workers=16,
        max_sessions=SESSIONS + 10, record=True,
    )  # fmt: skip
    with RouterThread(settings) as router:
        rss_before = _rss()
        with ThreadPoolExecutor(max_workers=8) as pool:
            ids = list(pool.map(lambda _: _abandon(router.url), range(SESSIONS)))
        assert len(set(ids)) == SESSIONS
        wait_for(lambda: router.manager.supervisor.live_count == 0, timeout=60)
        wait_for(lambda: not processes_for(state_dir), timeout=30)
        assert all(s.state in DORMANT for s in router.manager.sessions.live())
        assert len(router.manager.sessions) == SESSIONS
        growth = _rss() - rss_before
        assert growth < RSS_GROWTH_LIMIT, f"router RSS grew {growth / 2**20:.0f} MiB"
        # An abandoned id is still good: it resumes.
        with RawClient(router.url) as c:
            c.session_id = ids[0]
            assert c.text("echo", text="back") == "back"
    assert not processes_for(state_dir)  # and the router's shutdown committed what its record held
    with sqlite3.connect(state_dir / "router.db") as conn:
        states = dict(conn.execute("SELECT state, count(*) FROM sessions GROUP BY state").fetchall())
        requests = conn.execute("SELECT count(*) FROM requests WHERE method = 'tools/call'").fetchone()[0]
        unanswered = conn.execute(
            "SELECT count(*) FROM requests r LEFT JOIN responses p USING (ref_id) WHERE p.ref_id IS NULL"
        ).fetchone()[0]
    assert sum(states.values()) == SESSIONS
    assert set(states) <= {"reaped", "hibernated"}, states
    assert requests == SESSIONS + 1 and unanswered == 0
