"""`mcp-router serve` as a real process: signals end every worker; a crashed run's orphans are ended."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import time
from pathlib import Path

import httpx
import pytest

from tests.support import RawClient, auth_headers, initialize_body, run_cli, serve_process, wait_for
from workers.orphans import processes_for

SIGNAL_SHUTDOWN_LIMIT = 10.0
REAP_AND_FILL = 30.0  # a 1-s idle timeout, the reap, and the reserve's stand-in worker, under load


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_every_worker_within_ten_seconds(state_dir: Path, sig: signal.Signals) -> None:
    with serve_process(state_dir) as server:
        clients = [RawClient(server.url) for _ in range(3)]
        for c in clients:
            c.initialize()
            c.start_worker()
        assert len({p for c in clients for p in processes_for(state_dir, c.session_id)}) >= 3
        started = time.monotonic()
        server.proc.send_signal(sig)
        server.proc.wait(timeout=15)
        assert time.monotonic() - started < SIGNAL_SHUTDOWN_LIMIT
        assert not processes_for(state_dir)
        for c in clients:
            c.close()


def test_orphans_of_a_killed_router_are_ended_at_next_start(state_dir: Path) -> None:
    with serve_process(state_dir) as server, RawClient(server.url) as c:
        c.initialize()
        c.start_worker()
        assert processes_for(state_dir, c.session_id)
        server.proc.kill()
        server.proc.wait()
    assert processes_for(state_dir), "a SIGKILLed router leaves its workers behind"
    with serve_process(state_dir):
        wait_for(lambda: not processes_for(state_dir), timeout=10)


def test_sessions_command_shows_live_state_of_a_running_router(state_dir: Path) -> None:
    with serve_process(state_dir) as server, RawClient(server.url) as c:
        c.initialize(name="live-cli")
        out = run_cli("sessions", "--state-dir", str(state_dir))
        assert out.returncode == 0, out.stderr
        assert "PID" in out.stdout and "MEMORY" in out.stdout
        line = next(line for line in out.stdout.splitlines() if (c.session_id or "?") in line)
        assert "live-cli" in line
        c.delete()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ((), "resume reserve: 1 warm worker (at most 1, while browsed sessions sleep)"),
        (("--resume-reserve", "0"), "resume reserve: none (--resume-reserve 0)"),
    ],
    ids=["default", "none"],
)
def test_sessions_command_shows_the_resume_reserve_apart_from_the_sessions(
    state_dir: Path, args: tuple[str, ...], line: str
) -> None:
    """A conversation browses and goes quiet until it is reaped: the reserve's warm worker (by
    default) is a line of its own, not a session row, and the session's row has no worker."""
    reserve = 0 if args else 1
    with serve_process(state_dir, "--idle-timeout", "1", *args) as server, RawClient(server.url) as c:
        c.initialize(name="reserve-cli")
        c.text("browser_navigate", url="https://example.test/")

        def settled() -> bool:
            body = httpx.get(f"{server.base_url}/healthz", headers=auth_headers(), timeout=5, trust_env=False).json()
            return body["session_workers"] == 0 and body["reserve"] == reserve and body["workers"] == reserve

        wait_for(settled, timeout=REAP_AND_FILL)
        out = run_cli("sessions", "--state-dir", str(state_dir))
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[-1] == line, out.stdout
        [row] = [text for text in lines if "reserve-cli" in text]  # one session, the reserve in no row
        assert (c.session_id or "?") in row and " reaped " in row and " - " in row, out.stdout  # no worker pid
        assert len(lines) == 4, out.stdout  # header, rule, the session, the reserve
        c.delete()


def modes(state: Path) -> dict[str, int]:
    """Every path under ``state`` and its mode. The start-up probe's session directory may go while
    it is walked (rglob raised FileNotFoundError then): os.walk skips it, and so does this."""
    found: dict[str, int] = {}
    for root, dirs, files in os.walk(state):
        for path in [Path(root), *(Path(root) / name for name in dirs + files)]:
            with contextlib.suppress(FileNotFoundError):
                found[str(path.relative_to(state))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def test_serve_makes_its_token_and_keeps_the_state_dir_private(state_dir: Path) -> None:
    state = state_dir / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)  # as an older router left it
    with serve_process(state, seed=False) as server:
        token = (state / "token").read_text().strip()
        assert len(token) >= 43
        with RawClient(server.url, token=None) as anonymous:
            assert anonymous.post(initialize_body()).status_code == 401
        with RawClient(server.url, token=token) as c:
            c.initialize()
            assert c.text("echo", text="private") == "private"
            found = modes(state)
            c.delete()
    assert found["."] == 0o700
    assert found["token"] == 0o600 and found["router.db"] == 0o600
    loose = {path: mode for path, mode in found.items() if mode & 0o077 and not path.endswith(".log")}
    assert not loose, loose  # every file and directory the router made is its owner's alone


UVICORN_KEEP_ALIVE_DEFAULT = 5.0


def _healthz(sock: socket.socket, port: int) -> bytes:
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        assert chunk, f"the router closed the connection: {head!r}"
        head += chunk
    top, _, body = head.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in top.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return top.split(b"\r\n")[0]


def test_an_idle_kept_alive_connection_outlives_the_clients_own_expiry(state_dir: Path) -> None:
    """A client (httpx: 5 s) reusing its connection must not meet the router closing it."""
    with serve_process(state_dir) as server, socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        assert b" 200 " in _healthz(sock, server.port)
        time.sleep(UVICORN_KEEP_ALIVE_DEFAULT + 1.0)  # time passing is what is tested
        assert b" 200 " in _healthz(sock, server.port)
