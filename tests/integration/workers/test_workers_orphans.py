from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from workers_testlib import FAKE_GROUP_CHILD, PY, pid_alive, read_pids

from tests.support import wait_for
from workers import orphans

SLEEPER = "import time\nwhile True: time.sleep(1)"


@pytest.fixture
def popens() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _crashed_worker(
    popens: list[subprocess.Popen[bytes]], state_dir: Path, session_id: str, tmp_path: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], int]:
    pidfile = tmp_path / f"{session_id}.pids"
    env = {**os.environ, **orphans.marker_env(state_dir, session_id)}
    proc = subprocess.Popen(
        [PY, str(FAKE_GROUP_CHILD), str(pidfile), *extra],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    popens.append(proc)
    wait_for(pidfile.exists)
    _, grandchild = read_pids(pidfile)
    return proc, grandchild


def test_marker_env_is_resolved(tmp_path: Path) -> None:
    rel = Path(os.path.relpath(tmp_path))
    env = orphans.marker_env(rel, "s1")
    assert env == {"MCP_ROUTER_STATE_DIR": str(tmp_path.resolve()), "MCP_ROUTER_SESSION": "s1"}


def test_pid_file_round_trip(state_dir: Path) -> None:
    path = orphans.write_pid_file(state_dir, "s1", pid=10, pgid=11, port=20001)
    assert path == state_dir / "workers" / "s1.json"
    data = json.loads(path.read_text())
    assert (data["pid"], data["pgid"], data["port"]) == (10, 11, 20001)
    assert isinstance(data["started"], float)
    orphans.remove_pid_file(state_dir, "s1")
    orphans.remove_pid_file(state_dir, "s1")  # idempotent
    assert not path.exists()


def test_crashed_run_is_found_and_ended(
    state_dir: Path, tmp_path: Path, popens: list[subprocess.Popen[bytes]]
) -> None:
    # --clean-env: the grandchild is found through its process group, as Chromium's zygote children are
    proc, grandchild = _crashed_worker(popens, state_dir, "crashed", tmp_path, "--clean-env")
    orphans.write_pid_file(state_dir, "crashed", pid=proc.pid, pgid=proc.pid, port=20001)
    assert orphans.find_orphans(state_dir) == sorted([proc.pid, grandchild])
    assert orphans.processes_for(state_dir, "crashed") == sorted([proc.pid, grandchild])
    assert orphans.processes_for(state_dir, "other") == []

    found = orphans.end_orphans(state_dir, grace=2.0)
    assert sorted(found) == sorted([proc.pid, grandchild])
    assert proc.wait(timeout=10) is not None
    wait_for(lambda: not pid_alive(grandchild), timeout=5)
    assert orphans.processes_for(state_dir) == []
    assert not orphans.pid_file(state_dir, "crashed").exists()


def test_sigterm_ignored_gets_sigkill(
    state_dir: Path, tmp_path: Path, popens: list[subprocess.Popen[bytes]]
) -> None:
    proc, grandchild = _crashed_worker(popens, state_dir, "stubborn", tmp_path, "--ignore-term")
    assert orphans.end_processes(orphans.processes_for(state_dir), grace=0.2) == []
    proc.wait(timeout=10)
    assert not pid_alive(grandchild)


def test_state_dir_marker_alone_is_not_a_worker(
    state_dir: Path, popens: list[subprocess.Popen[bytes]]
) -> None:
    # The router's own env may carry MCP_ROUTER_STATE_DIR (it is its config variable).
    env = {**os.environ, "MCP_ROUTER_STATE_DIR": str(state_dir.resolve())}
    env.pop("MCP_ROUTER_SESSION", None)
    proc = subprocess.Popen([PY, "-c", SLEEPER], env=env, start_new_session=True)
    popens.append(proc)
    wait_for(lambda: pid_alive(proc.pid))
    assert proc.pid not in orphans.processes_for(state_dir)


def test_other_state_dir_is_left_alone(
    state_dir: Path, tmp_path: Path, popens: list[subprocess.Popen[bytes]]
) -> None:
    other = tmp_path / "other-state"
    other.mkdir()
    proc, grandchild = _crashed_worker(popens, other, "s", tmp_path)
    assert orphans.end_orphans(state_dir) == []
    assert pid_alive(proc.pid) and pid_alive(grandchild)
    assert orphans.end_processes(orphans.processes_for(other)) == []
    proc.wait(timeout=10)


def test_profile_dir_on_command_line_is_enough(
    state_dir: Path, popens: list[subprocess.Popen[bytes]]
) -> None:
    # A Chromium child whose group leader died carries neither marker nor group: its flag remains.
    flag = f"--user-data-dir={state_dir.resolve()}/sessions/abc/profile"
    proc = subprocess.Popen([PY, "-c", SLEEPER, flag], start_new_session=True)
    popens.append(proc)
    wait_for(lambda: proc.pid in orphans.processes_for(state_dir))
    assert proc.pid in orphans.processes_for(state_dir, "abc")
    assert proc.pid not in orphans.processes_for(state_dir, "abd")
    assert orphans.end_orphans(state_dir) == [proc.pid]
    proc.wait(timeout=10)
