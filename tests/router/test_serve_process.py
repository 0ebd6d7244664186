"""`mcp-router serve` as a real process: signals end every worker; a crashed run's orphans are ended."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import FAKE_WORKER_COMMAND, ROOT, RawClient, free_port, initialize_body, seed_token, wait_for
from workers.orphans import processes_for


def start_router(state: Path, port: int, *, seed: bool = True) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MCP_ROUTER_WORKER_COMMAND": json.dumps(FAKE_WORKER_COMMAND)}
    if seed:
        seed_token(state)
    log = state / f"router-{port}.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "router.cli", "serve", "--port", str(port), "--state-dir", str(state)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(log.read_text())
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_every_worker_within_ten_seconds(state_dir: Path, sig: signal.Signals) -> None:
    port = free_port()
    proc = start_router(state_dir, port)
    try:
        clients = [RawClient(f"http://127.0.0.1:{port}/mcp") for _ in range(3)]
        for c in clients:
            c.initialize()
        assert len({p for c in clients for p in processes_for(state_dir, c.session_id)}) >= 3
        started = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=15)
        assert time.monotonic() - started < 10
        assert not processes_for(state_dir)
        for c in clients:
            c.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_orphans_of_a_killed_router_are_ended_at_next_start(state_dir: Path) -> None:
    port = free_port()
    proc = start_router(state_dir, port)
    with RawClient(f"http://127.0.0.1:{port}/mcp") as c:
        c.initialize()
        orphans = processes_for(state_dir, c.session_id)
        assert orphans
    proc.kill()
    proc.wait()
    assert processes_for(state_dir), "a SIGKILLed router leaves its workers behind"
    second = start_router(state_dir, free_port())
    try:
        wait_for(lambda: not processes_for(state_dir), timeout=10)
    finally:
        second.terminate()
        second.wait(timeout=15)


def test_sessions_command_shows_live_state_of_a_running_router(state_dir: Path) -> None:
    port = free_port()
    proc = start_router(state_dir, port)
    try:
        with RawClient(f"http://127.0.0.1:{port}/mcp") as c:
            c.initialize(name="live-cli")
            out = subprocess.run(
                [sys.executable, "-m", "router.cli", "sessions", "--state-dir", str(state_dir)],
                cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
            )
            assert out.returncode == 0, out.stderr
            assert "PID" in out.stdout and "MEMORY" in out.stdout
            line = next(line for line in out.stdout.splitlines() if (c.session_id or "?") in line)
            assert "live-cli" in line
            c.delete()
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def modes(state: Path) -> dict[str, int]:
    return {str(p.relative_to(state)): stat.S_IMODE(p.lstat().st_mode) for p in [state, *state.rglob("*")]}


def test_serve_makes_its_token_and_keeps_the_state_dir_private(state_dir: Path) -> None:
    state = state_dir / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)  # as an older router left it
    port = free_port()
    proc = start_router(state, port, seed=False)
    try:
        token = (state / "token").read_text().strip()
        assert len(token) >= 43
        with RawClient(f"http://127.0.0.1:{port}/mcp", token=None) as anonymous:
            assert anonymous.post(initialize_body()).status_code == 401
        with RawClient(f"http://127.0.0.1:{port}/mcp", token=token) as c:
            c.initialize()
            assert c.text("echo", text="private") == "private"
            found = modes(state)
            c.delete()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert found["."] == 0o700
    assert found["token"] == 0o600 and found["router.db"] == 0o600
    loose = {path: mode for path, mode in found.items() if mode & 0o077 and not path.endswith(".log")}
    assert not loose, loose  # every file and directory the router made is its owner's alone
