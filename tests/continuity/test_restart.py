"""The router itself goes away (SIGKILL, SIGTERM) and comes back: old session ids carry on."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from router.sessions.continuity import RESUMED_NOTICE
from tests.continuity.conftest import wait_saved
from tests.support import ROOT, RawClient, auth_headers, free_port, seed_token, wait_for
from workers.orphans import processes_for

START_TIMEOUT = 20.0


@contextmanager
def router_process(state: Path, port: int, browser: str) -> Iterator[subprocess.Popen[bytes]]:
    argv = [sys.executable, "-m", "router.cli", "serve", "--state-dir", str(state), "--port", str(port),
            "--browser", browser, "--log-level", "warning"]  # fmt: skip
    seed_token(state)
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _healthy(port) or proc.poll() is not None, timeout=START_TIMEOUT)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _db_state(state: Path, session_id: str) -> str:
    with sqlite3.connect(state / "router.db") as conn:
        row = conn.execute("SELECT state FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return str(row[0]) if row else ""


def test_kill_9_of_the_router_then_restart_resumes_the_old_session_id(
    state_dir: Path, chromium: str, pages: str
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with RawClient(url) as client:
        with router_process(state_dir, port, chromium) as proc:
            client.initialize()
            client.text("browser_navigate", url=f"{pages}/set?v=rk")
            client.text("browser_navigate", url=f"{pages}/second")
            wait_saved(state_dir, client, "rk", "/second")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        assert processes_for(state_dir, client.session_id), "the workers outlive a SIGKILLed router"

        with router_process(state_dir, port, chromium):
            # Orphans of the dead run are ended at start; the old id is resumed on a new worker.
            snapshot = client.text("browser_snapshot")
            assert f"- Page URL: {pages}/second" in snapshot
            assert RESUMED_NOTICE in snapshot
            assert "cookie=rk storage=rk" in client.text("browser_navigate", url=f"{pages}/get")
            assert client.delete().status_code == 200
            assert client.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).status_code == 404


def test_sigterm_saves_ends_workers_and_the_session_resumes_after_restart(
    state_dir: Path, chromium: str, pages: str
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with RawClient(url) as client:
        with router_process(state_dir, port, chromium) as proc:
            client.initialize()
            client.text("browser_navigate", url=f"{pages}/set?v=st")
            held = httpx.Client(timeout=30, headers=auth_headers())
            # A GET stream open at shutdown must not hold the shutdown up.
            stream = held.stream("GET", url, headers={"accept": "text/event-stream",
                                                      "mcp-session-id": client.session_id or ""})  # fmt: skip
            stream.__enter__()
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            # uvicorn re-raises the signal once shut down cleanly, so -SIGTERM is the normal status.
            assert proc.wait(timeout=15) in (0, -signal.SIGTERM)
            elapsed = time.monotonic() - started
            stream.__exit__(None, None, None)
            held.close()
        assert elapsed < 8, f"shutdown took {elapsed:.1f}s"
        assert not processes_for(state_dir)
        assert _db_state(state_dir, client.session_id or "") == "hibernated"

        with router_process(state_dir, port, chromium):
            assert "cookie=st storage=st" in client.text("browser_navigate", url=f"{pages}/get")
            client.delete()


def test_sessions_end_command_ends_a_session_for_good(state_dir: Path, chromium: str, pages: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    cli = [sys.executable, "-m", "router.cli", "sessions", "--state-dir", str(state_dir), "--end"]
    with RawClient(url) as live, RawClient(url) as offline:
        with router_process(state_dir, port, chromium):
            live.initialize()
            offline.initialize()
            out = subprocess.run([*cli, live.session_id or ""], cwd=ROOT, capture_output=True, text=True, check=False)
            assert out.returncode == 0, out.stderr
            assert live.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).status_code == 404
        # No router running: the record and the files are updated directly.
        out = subprocess.run([*cli, offline.session_id or ""], cwd=ROOT, capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
        assert not (state_dir / "sessions" / (offline.session_id or "")).exists()
        assert _db_state(state_dir, offline.session_id or "") == "closed"
        with router_process(state_dir, port, chromium):
            assert offline.post({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}).status_code == 404
        unknown = subprocess.run([*cli, "x" * 32], cwd=ROOT, capture_output=True, text=True, check=False)
        assert unknown.returncode == 1
    assert os.path.exists(state_dir / "router.db")
