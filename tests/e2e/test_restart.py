"""The router itself goes away (SIGKILL, SIGTERM) and comes back: old session ids carry on."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import httpx

from router.record.schema import BUSY_TIMEOUT_MS
from router.sessions.resume_notice import NOTICE_PREFIX as RESUMED_NOTICE
from tests.support import RawClient, auth_headers, run_cli, serve_process, spare_port, wait_saved
from workers.orphans import processes_for

QUIET = ("--log-level", "warning")
# Shorter than the record's busy timeout: the answer waits for it, then for its commit.
LOCK_HELD_S = 1.0


def _db_state(state: Path, session_id: str) -> str:
    with sqlite3.connect(state / "router.db") as conn:
        row = conn.execute("SELECT state FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return str(row[0]) if row else ""


def test_kill_9_of_the_router_then_restart_resumes_the_old_session_id(
    state_dir: Path, chromium: str, pages: str
) -> None:
    port = spare_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with RawClient(url) as client:
        with serve_process(state_dir, *QUIET, port=port, browser=chromium) as server:
            client.initialize()
            client.text("browser_navigate", url=f"{pages}/set?v=rk")
            client.text("browser_navigate", url=f"{pages}/second")
            wait_saved(state_dir, client, "rk", "/second")
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait(timeout=10)
        assert processes_for(state_dir, client.session_id), "the workers outlive a SIGKILLed router"

        with serve_process(state_dir, *QUIET, port=port, browser=chromium):
            # Orphans of the dead run are ended at start; the old id is resumed on a new worker.
            snapshot = client.text("browser_snapshot")
            assert f"- Page URL: {pages}/second" in snapshot
            assert RESUMED_NOTICE in snapshot
            assert "cookie=rk storage=rk" in client.text("browser_navigate", url=f"{pages}/get")
            assert client.delete().status_code == 200
            assert client.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).status_code == 404


def test_an_answer_waits_for_a_lock_on_the_record_and_a_kill_right_after_loses_nothing(
    state_dir: Path, chromium: str, pages: str
) -> None:
    """A tool answer leaves once its call is committed: another connection holding the record's
    write lock for a while (a shell's short transaction) holds the answer up until it can commit,
    and a router SIGKILLed right after the answer has the call in its record."""
    port = spare_port()
    url = f"http://127.0.0.1:{port}/mcp"
    db = state_dir / "router.db"
    with RawClient(url) as client:
        with serve_process(state_dir, *QUIET, port=port, browser=chromium) as server:
            client.initialize()
            client.text("browser_navigate", url=f"{pages}/second")
            other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")
            release = threading.Timer(LOCK_HELD_S, lambda: other.execute("ROLLBACK"))
            release.start()
            try:
                started = time.monotonic()
                snapshot = client.text("browser_snapshot")
                took = time.monotonic() - started
                server.proc.send_signal(signal.SIGKILL)
                server.proc.wait(timeout=10)
            finally:
                release.join()
                other.close()
        with sqlite3.connect(db) as conn:  # as the kill left it: nothing replays anything
            rows = conn.execute(
                """SELECT p.status, p.page_snapshot FROM requests r JOIN responses p USING (ref_id)
                   WHERE r.session_id = ? AND r.tool = 'browser_snapshot'""",
                (client.session_id,),
            ).fetchall()
        with serve_process(state_dir, *QUIET, port=port, browser=chromium):  # ends the dead run's workers
            client.delete()
    assert "This is the second page" in snapshot
    assert LOCK_HELD_S * 0.9 < took < BUSY_TIMEOUT_MS / 1000, f"the answer took {took:.1f} s"
    assert len(rows) == 1 and rows[0][0] == "success"
    assert "This is the second page" in rows[0][1]


def test_sigterm_saves_ends_workers_and_the_session_resumes_after_restart(
    state_dir: Path, chromium: str, pages: str
) -> None:
    port = spare_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with RawClient(url) as client:
        with serve_process(state_dir, *QUIET, port=port, browser=chromium) as server:
            client.initialize()
            client.text("browser_navigate", url=f"{pages}/set?v=st")
            held = httpx.Client(timeout=30, headers=auth_headers())
            # A GET stream open at shutdown must not hold the shutdown up.
            stream = held.stream("GET", url, headers={"accept": "text/event-stream",
                                                      "mcp-session-id": client.session_id or ""})  # fmt: skip
            stream.__enter__()
            started = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            # uvicorn re-raises the signal once shut down cleanly, so -SIGTERM is the normal status.
            assert server.proc.wait(timeout=15) in (0, -signal.SIGTERM)
            elapsed = time.monotonic() - started
            stream.__exit__(None, None, None)
            held.close()
        assert elapsed < 8, f"shutdown took {elapsed:.1f}s"
        assert not processes_for(state_dir)
        assert _db_state(state_dir, client.session_id or "") == "hibernated"

        with serve_process(state_dir, *QUIET, port=port, browser=chromium):
            assert "cookie=st storage=st" in client.text("browser_navigate", url=f"{pages}/get")
            client.delete()


def test_sessions_end_command_ends_a_session_for_good(state_dir: Path, chromium: str, pages: str) -> None:
    port = spare_port()
    url = f"http://127.0.0.1:{port}/mcp"
    end = ("sessions", "--state-dir", str(state_dir), "--end")
    with RawClient(url) as live, RawClient(url) as offline:
        with serve_process(state_dir, *QUIET, port=port, browser=chromium):
            live.initialize()
            offline.initialize()
            out = run_cli(*end, live.session_id or "")
            assert out.returncode == 0, out.stderr
            assert live.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).status_code == 404
        # No router running: the record and the files are updated directly.
        out = run_cli(*end, offline.session_id or "")
        assert out.returncode == 0, out.stderr
        assert not (state_dir / "sessions" / (offline.session_id or "")).exists()
        assert _db_state(state_dir, offline.session_id or "") == "closed"
        with serve_process(state_dir, *QUIET, port=port, browser=chromium):
            assert offline.post({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}).status_code == 404
        unknown = run_cli(*end, "x" * 32)
        assert unknown.returncode == 1
    assert os.path.exists(state_dir / "router.db")
