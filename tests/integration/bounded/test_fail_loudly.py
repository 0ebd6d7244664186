"""A router whose core part died says so on /healthz (503) and exits non-zero; a second router
on the same state directory refuses to start and touches nothing."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.cli.main import EXIT_FAILED, EXIT_STATE_LOCKED
from router.health import Health
from router.record.batches import BatchWriter
from router.record.rows import RowWriter
from router.state_lock import LOCK_NAME, StateDirLocked, StateLock, lock_status
from tests.support import (
    FAKE_WORKER,
    ROOT,
    RawClient,
    RouterThread,
    auth_headers,
    router_settings,
    seed_token,
    spare_port,
    wait_for,
)
from workers.orphans import processes_for

FAULTY = Path(__file__).with_name("faulty_serve.py")
EXIT_WAIT = 30.0


def _healthz(port: int) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/healthz", headers=auth_headers(), timeout=5, trust_env=False)


def _up(port: int, proc: subprocess.Popen[bytes] | None = None) -> bool:
    if proc is not None and proc.poll() is not None:
        return True  # exited: the caller's assertions say why
    try:
        return _healthz(port).status_code == 200
    except httpx.HTTPError:
        return False


def _serve_argv(state: Path, port: int, *extra: str) -> list[str]:
    seed_token(state)
    return [
        "serve", "--port", str(port), "--state-dir", str(state),
        "--worker-command", f"{sys.executable} {FAKE_WORKER} {{port}}", *extra,
    ]


@contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=EXIT_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ------------------------------------------------------------------------ /healthz, in process


def test_a_dead_recorder_writer_makes_healthz_503(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with RouterThread(router_settings(state_dir, record=True)) as router:
        assert _healthz(router.port).json()["record"]["failed_batches"] == 0

        def broken(*_: Any, **__: Any) -> list[int]:
            raise RuntimeError("injected writer failure")

        monkeypatch.setattr(BatchWriter, "write", broken)
        with RawClient(router.url) as c:
            c.initialize()
            answer = wait_for(lambda: (a := _healthz(router.port)).status_code == 503 and a)
            assert answer.json()["status"] == "failing"
            assert "injected writer failure" in answer.json()["failures"]["recorder"]
            c.delete()


def test_failed_batches_show_in_healthz_and_metrics(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with RouterThread(router_settings(state_dir, record=True)) as router, RawClient(router.url) as c:
        c.initialize()

        def disk_full(*args: Any) -> None:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(RowWriter, "apply", disk_full)  # every row write fails: a full disk
        c.call("echo", text="lost")
        record = wait_for(lambda: (r := _healthz(router.port).json()["record"])["failed_batches"] and r)
        assert record["failed_rows"] >= 1 and record["failing"] is True
        metrics = httpx.get(f"{router.base_url}/metrics", headers=auth_headers(), timeout=5, trust_env=False).text
        failed = re.search(r"^mcp_router_recorder_failed_batches (\S+)$", metrics, re.MULTILINE)
        assert failed and float(failed.group(1)) >= 1
        assert _healthz(router.port).status_code == 200  # lost rows are counted, not fatal
        monkeypatch.undo()
        c.delete()


def test_health_reports_each_failure_once() -> None:
    health = Health()
    heard: list[tuple[str, str]] = []
    health.on_failure(lambda c, r: heard.append((c, r)))
    assert health.ok
    health.fail("recorder", "first")
    health.fail("recorder", "second")
    health.reporter("core")("boom")
    assert heard == [("recorder", "first"), ("core", "boom")]
    assert health.failures == {"recorder": "first", "core": "boom"} and not health.ok
    late: list[str] = []
    health.on_failure(lambda c, r: late.append(c))  # hears the past failures at once
    assert late == ["recorder", "core"]


# ------------------------------------------------------------------------ exit status


def test_a_serve_whose_core_task_dies_exits_non_zero(state_dir: Path) -> None:
    port = spare_port()
    argv = [sys.executable, str(FAULTY), "core", *_serve_argv(state_dir, port)]
    with _process(argv, state_dir / "serve.log") as proc:
        wait_for(lambda: _up(port, proc))
        assert proc.poll() is None, (state_dir / "serve.log").read_text()
        with RawClient(f"http://127.0.0.1:{port}/mcp") as c:
            c.initialize()
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=EXIT_WAIT) == EXIT_FAILED
    assert "injected core failure" in (state_dir / "serve.log").read_text()


def test_a_serve_whose_recorder_dies_exits_non_zero(state_dir: Path) -> None:
    port = spare_port()
    argv = [sys.executable, str(FAULTY), "recorder", *_serve_argv(state_dir, port)]
    with _process(argv, state_dir / "serve.log") as proc:
        wait_for(lambda: _up(port, proc))
        with RawClient(f"http://127.0.0.1:{port}/mcp") as c:
            c.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert proc.wait(timeout=EXIT_WAIT) == EXIT_FAILED
    assert "injected writer failure" in (state_dir / "serve.log").read_text()


def test_a_serve_that_cannot_bind_exits_non_zero(state_dir: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "router.cli", *_serve_argv(state_dir, port)]
        with _process(argv, state_dir / "serve.log") as proc:
            assert proc.wait(timeout=EXIT_WAIT) != 0


# ------------------------------------------------------------------------ the state-dir lock


def test_a_second_serve_on_the_same_state_dir_refuses_and_touches_nothing(state_dir: Path) -> None:
    port = spare_port()
    first_argv = [sys.executable, "-m", "router.cli", *_serve_argv(state_dir, port)]
    with _process(first_argv, state_dir / "first.log") as first:
        wait_for(lambda: _up(port, first))
        assert first.poll() is None, (state_dir / "first.log").read_text()
        with RawClient(f"http://127.0.0.1:{port}/mcp") as c:
            c.initialize()
            c.start_worker()
            workers = processes_for(state_dir, c.session_id)
            assert workers
            status = lock_status(state_dir)
            assert status.held and status.pid == first.pid
            # Same state dir, another port: it must neither sweep the first one's workers nor bind.
            second_argv = [sys.executable, "-m", "router.cli", *_serve_argv(state_dir, spare_port())]
            with _process(second_argv, state_dir / "second.log") as second:
                assert second.wait(timeout=EXIT_WAIT) == EXIT_STATE_LOCKED
            message = (state_dir / "second.log").read_text()
            assert "in use by another router" in message and f"pid {first.pid}" in message
            assert processes_for(state_dir, c.session_id) == workers
            assert c.text("echo", text="still here") == "still here"
            c.delete()
    assert not lock_status(state_dir).held


def test_the_lock_is_exclusive_and_dropped_with_its_holder(tmp_path: Path) -> None:
    state = tmp_path / "new" / "state"
    assert lock_status(state) == lock_status(state)  # probing creates nothing
    assert not state.exists()
    with StateLock(state) as lock:
        assert lock.held and (state / LOCK_NAME).read_text().strip() == str(os.getpid())
        assert state.stat().st_mode & 0o777 == 0o700
        with pytest.raises(StateDirLocked) as refused:
            StateLock(state).acquire()
        assert refused.value.pid == os.getpid()
        assert lock_status(state).held
    assert not lock_status(state).held
    StateLock(state).acquire().release()  # free again; the file stays
    # A holder that dies (SIGKILL) drops it: the kernel releases flocks with the process.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; from router.state_lock import StateLock; "
         f"StateLock(__import__('pathlib').Path({str(state)!r})).acquire(); print('held', flush=True); "
         "time.sleep(60)"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        assert lock_status(state).held and lock_status(state).pid == holder.pid
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    assert not lock_status(state).held
    StateLock(state).acquire().release()
