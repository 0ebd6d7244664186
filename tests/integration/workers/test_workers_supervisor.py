from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import anyio
import httpx
import pytest
from workers_testlib import FAKE_GROUP_CHILD, PY, pid_alive, read_pids

from tests.support import async_wait_for
from workers import orphans
from workers._exceptions import ReadyTimeout, SpawnError, SupervisorNotRunning
from workers.ports import PortAllocator, derive_port, port_is_bindable
from workers.scratch import ROOT_PREFIX, ROOT_RECORD
from workers.spec import WorkerSpec
from workers.supervisor import Supervisor, Worker

HTTP_SERVER = (PY, "-m", "http.server", "{port}", "--bind", "127.0.0.1", "--directory", "{output_dir}")


def _sid() -> str:
    return "t-" + uuid.uuid4().hex


def _supervisor(
    state_dir: Path,
    argv: tuple[str, ...] = HTTP_SERVER,
    *,
    ready_timeout: float = 10.0,
    ports: PortAllocator | None = None,
) -> Supervisor:
    spec = WorkerSpec(argv_template=argv, ready_timeout=ready_timeout)
    return Supervisor(
        spec=spec,
        state_dir=state_dir,
        browser="/nonexistent/chromium",
        cli="/nonexistent/cli.js",
        ports=ports,
    )


class Exits:
    def __init__(self) -> None:
        self.calls: list[tuple[Worker, int, bool]] = []

    def __call__(self, worker: Worker, returncode: int) -> None:
        self.calls.append((worker, returncode, worker.stopping))


async def test_spawn_serves_and_stop_cleans_up(state_dir: Path) -> None:
    sup = _supervisor(state_dir)
    exits = Exits()
    sup.add_exit_listener(exits)
    sid = _sid()
    async with sup.run():
        worker = await sup.spawn(sid)
        assert worker.alive()
        assert worker.url == f"http://127.0.0.1:{worker.port}/mcp"
        assert worker.host_header == f"localhost:{worker.port}"
        assert worker.output_dir == sup.state_dir / "sessions" / sid / "out"
        assert worker.profile_dir.is_dir() and worker.output_dir.is_dir()
        assert sup.get(sid) is worker
        assert sup.workers() == [worker]
        assert sup.live_count == 1
        assert await sup.spawn(sid) is worker  # a live worker is reused, not doubled
        record = json.loads((state_dir / "workers" / f"{sid}.json").read_text())
        assert (record["pid"], record["pgid"], record["port"]) == (worker.pid, worker.pid, worker.port)
        assert worker.pid in orphans.processes_for(state_dir, sid)

        async with httpx.AsyncClient() as client:
            resp = await client.get(f"http://127.0.0.1:{worker.port}/")
        assert resp.status_code == 200

        await sup.stop(sid)
        assert not worker.alive()
        assert worker.stopping
        assert exits.calls == [(worker, worker.returncode, True)]
        assert await worker.wait_exited() == -signal.SIGTERM
        assert sup.get(sid) is None and sup.live_count == 0
        assert not (state_dir / "workers" / f"{sid}.json").exists()
        assert worker.port not in sup._ports.held()
        assert worker.profile_dir.is_dir()  # kept for a later resume
        assert orphans.processes_for(state_dir) == []

        await sup.stop(sid)  # idempotent
        await sup.stop("never-existed")
        assert len(exits.calls) == 1

        again = await sup.spawn(sid)  # same id after stop: a new worker
        assert again is not worker and again.alive()
        await sup.forget(sid)
        assert not (state_dir / "sessions" / sid).exists()
    assert len(exits.calls) == 2


async def test_exit_on_its_own_is_detected_at_once(state_dir: Path) -> None:
    sup = _supervisor(state_dir)
    exits = Exits()
    sup.add_exit_listener(exits)
    async with sup.run():
        worker = await sup.spawn(_sid())
        os.kill(worker.pid, signal.SIGKILL)
        with anyio.fail_after(5):
            assert await worker.wait_exited() == -signal.SIGKILL
        assert exits.calls == [(worker, -signal.SIGKILL, False)]
        assert sup.get(worker.session_id) is None
        assert worker.port not in sup._ports.held()


async def test_run_exit_stops_every_worker_concurrently(state_dir: Path) -> None:
    sup = _supervisor(state_dir)
    exits = Exits()
    sup.add_exit_listener(exits)
    async with sup.run():
        workers = [await sup.spawn(_sid()) for _ in range(3)]
        assert sup.live_count == 3
    assert not any(w.alive() for w in workers)
    assert sorted(w.session_id for w, _, stopping in exits.calls if stopping) == sorted(
        w.session_id for w in workers
    )
    assert orphans.processes_for(state_dir) == []
    assert sup._ports.held() == {}


async def test_listener_error_does_not_hide_the_exit_from_others(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sup = _supervisor(state_dir)
    exits = Exits()

    def broken(worker: Worker, returncode: int) -> None:
        raise RuntimeError("listener bug")

    sup.add_exit_listener(broken)
    sup.add_exit_listener(exits)
    async with sup.run():
        worker = await sup.spawn(_sid())
        await sup.stop(worker.session_id)
    assert len(exits.calls) == 1
    assert "listener bug" in caplog.text


async def test_spawn_error_carries_stderr_when_child_dies_at_once(state_dir: Path) -> None:
    argv = (PY, "-c", "import sys; sys.stderr.write('no browser at {browser}\\n'); sys.exit(3)")
    sup = _supervisor(state_dir, argv)
    async with sup.run():
        with pytest.raises(SpawnError) as info:
            await sup.spawn("dies")
        assert info.value.returncode == 3
        assert "no browser at /nonexistent/chromium" in info.value.stderr_tail
        assert info.value.session_id == "dies"
        assert sup.get("dies") is None
        assert sup._ports.held() == {}
        assert not orphans.pid_file(state_dir, "dies").exists()


async def test_ready_timeout_kills_the_child(state_dir: Path) -> None:
    argv = (
        PY,
        "-c",
        "import sys, time; sys.stderr.write('warming up\\n'); sys.stderr.flush(); time.sleep(60)",
    )
    sup = _supervisor(state_dir, argv, ready_timeout=0.5)
    async with sup.run():
        with pytest.raises(ReadyTimeout) as info:
            await sup.spawn("slow")
        assert info.value.returncode is None
        assert "warming up" in info.value.stderr_tail
        assert orphans.processes_for(state_dir) == []
        assert sup._ports.held() == {}


async def test_missing_executable_is_a_spawn_error(state_dir: Path) -> None:
    sup = _supervisor(state_dir, ("/nonexistent/node", "{cli}"))
    async with sup.run():
        with pytest.raises(SpawnError, match="cannot start"):
            await sup.spawn("nonode")
        assert sup._ports.held() == {}


async def test_bind_race_retries_on_next_port(state_dir: Path) -> None:
    # The allocator is told the squatted port is free, so only the worker's own bind notices the
    # squatter; any other port it checks (the retry's: one taken by a worker of a test running
    # beside this one would fail the retry too).
    sid = next(s for s in (_sid() for _ in range(1000)) if port_is_bindable(derive_port(s)))
    squatted = derive_port(sid)
    sup = _supervisor(state_dir, ports=PortAllocator(is_free=lambda p: p == squatted or port_is_bindable(p)))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", squatted))
        squatter.listen()
        async with sup.run():
            worker = await sup.spawn(sid)
            assert worker.port != squatted
            assert list(sup._ports.held()) == [worker.port]


async def test_spawn_outside_run_is_refused(state_dir: Path) -> None:
    with pytest.raises(SupervisorNotRunning):
        await _supervisor(state_dir).spawn("x")


def _start_crashed_worker(state_dir: Path, pidfile: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **orphans.marker_env(state_dir, "old")}
    return subprocess.Popen(
        [PY, str(FAKE_GROUP_CHILD), str(pidfile)], env=env, start_new_session=True, stderr=subprocess.DEVNULL
    )


async def test_run_ends_orphans_of_a_crashed_run(state_dir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    proc = _start_crashed_worker(state_dir, pidfile)
    try:
        await async_wait_for(pidfile.exists)
        _, grandchild = read_pids(pidfile)
        orphans.write_pid_file(state_dir, "old", pid=proc.pid, pgid=proc.pid, port=20001)
        async with _supervisor(state_dir).run():
            await async_wait_for(lambda: proc.poll() is not None and not pid_alive(grandchild), within=5)
            assert not orphans.pid_file(state_dir, "old").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


async def test_cancelled_run_still_ends_workers_even_stubborn_ones(state_dir: Path) -> None:
    # The worker ignores SIGTERM, so this also covers SIGKILL escalation inside the shutdown budget.
    listen = "import socket, sys, signal, time\n"
    listen += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    listen += "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
    listen += "while True: time.sleep(1)\n"
    argv = (PY, "-c", listen, "{port}")
    spec = WorkerSpec(argv_template=argv, ready_timeout=10.0, stop_grace=0.5)
    sup = Supervisor(spec=spec, state_dir=state_dir, browser="b", cli="c")
    exits = Exits()
    sup.add_exit_listener(exits)
    with anyio.CancelScope() as scope:
        async with sup.run():
            worker = await sup.spawn(_sid())
            scope.cancel()
            await anyio.sleep_forever()
    assert not worker.alive()
    assert exits.calls == [(worker, -signal.SIGKILL, True)]
    assert orphans.processes_for(state_dir) == []


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _check_private(sup: Supervisor, worker: Worker, other: Worker) -> Path:
    """The worker's environment and dirs; returns the run's temp root."""
    env = _environ(worker.pid)
    assert env["ALLOWED_HOSTS"] == worker.host_header
    assert worker.host_header.startswith("w-") and worker.host_header != other.host_header
    assert worker.host_header not in Path(f"/proc/{worker.pid}/cmdline").read_text()  # argv is public
    assert env["SPEC_VALUE"] == "1"
    assert env["XDG_CACHE_HOME"] == str(sup.session_dir(worker.session_id) / "cache") == str(worker.cache_dir)
    assert worker.temp_dir is not None and env["TMPDIR"] == str(worker.temp_dir)
    assert worker.temp_dir.is_dir() and stat.S_IMODE(worker.temp_dir.stat().st_mode) == 0o700
    # Short enough for the unix sockets Chromium and Playwright make in it (~104 bytes at most).
    assert len(str(worker.temp_dir)) <= 60
    root = worker.temp_dir.parent
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert (sup.state_dir / ROOT_RECORD).read_text() == str(root)
    (worker.temp_dir / "org.chromium.Chromium.x").mkdir()  # as a browser leaves it when killed
    return root


def _gone(*paths: Path | None) -> bool:
    return not any(p is not None and p.exists() for p in paths)


async def test_each_worker_gets_its_secret_host_and_private_dirs_in_its_environment(state_dir: Path) -> None:
    spec = WorkerSpec(argv_template=HTTP_SERVER, env={"SPEC_VALUE": "1"}, allowed_hosts_env="ALLOWED_HOSTS")
    sup = Supervisor(spec=spec, state_dir=state_dir, browser="/b", cli="/c.js")
    stale = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))  # as a SIGKILLed router leaves it
    (stale / "leftover").mkdir()
    (state_dir / ROOT_RECORD).write_text(str(stale))
    async with sup.run():
        assert _gone(stale)
        first, second = await sup.spawn(_sid()), await sup.spawn(_sid())
        root = _check_private(sup, first, second)
        os.kill(first.pid, signal.SIGKILL)  # nothing of it may stay behind, killed or not
        await first.wait_exited()
        assert _gone(first.temp_dir)
        await sup.stop(second.session_id)
        assert _gone(second.temp_dir)
    assert _gone(root, state_dir / ROOT_RECORD)


async def test_without_the_lock_a_worker_gets_the_host_local_servers_accept(state_dir: Path) -> None:
    sup = _supervisor(state_dir)
    async with sup.run():
        worker = await sup.spawn(_sid())
        assert worker.host_header == f"localhost:{worker.port}"
        assert "PLAYWRIGHT_MCP_ALLOWED_HOSTS" not in _environ(worker.pid)
        await sup.stop(worker.session_id)
