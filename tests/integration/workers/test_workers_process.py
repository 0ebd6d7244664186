from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
from workers_testlib import FAKE_GROUP_CHILD, PY, pid_alive, read_pids

from tests.support import async_wait_for
from workers.process import STDERR_TAIL_BYTES, ChildProcess, group_members


async def _start_tree(tmp_path: Path, *extra: str) -> tuple[ChildProcess, Path]:
    pidfile = tmp_path / "pids"
    child = await ChildProcess.start([PY, str(FAKE_GROUP_CHILD), str(pidfile), *extra], env=os.environ)
    return child, pidfile


async def test_terminate_kills_the_whole_group(tmp_path: Path) -> None:
    child, pidfile = await _start_tree(tmp_path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.pump_stderr)
        await async_wait_for(pidfile.exists)
        pid, grandchild = read_pids(pidfile)
        assert pid == child.pid == child.pgid
        assert os.getpgid(grandchild) == child.pgid
        assert sorted(group_members(child.pgid)) == sorted([pid, grandchild])
        rc = await child.terminate(grace=2.0)
        assert rc == -signal.SIGTERM
        assert not pid_alive(grandchild)
        assert group_members(child.pgid) == []
        await child.drain_stderr()
        assert "fake worker tree up" in child.stderr_tail()
        await child.aclose()


async def test_terminate_escalates_to_sigkill(tmp_path: Path) -> None:
    child, pidfile = await _start_tree(tmp_path, "--ignore-term")
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.pump_stderr)
        await async_wait_for(pidfile.exists)
        _, grandchild = read_pids(pidfile)
        started = time.monotonic()
        rc = await child.terminate(grace=0.3)
        assert rc == -signal.SIGKILL
        assert time.monotonic() - started >= 0.3
        assert not pid_alive(grandchild)
        await child.aclose()


async def test_stderr_tail_is_bounded(tmp_path: Path) -> None:
    script = "import sys\nfor i in range(20000): sys.stderr.write(f'{i:08d}\\n')\n"
    child = await ChildProcess.start([PY, "-c", script], env=os.environ)
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.pump_stderr)
        assert await child.wait() == 0
        await child.drain_stderr(5.0)
        tail = child.stderr_tail()
        assert len(tail) == STDERR_TAIL_BYTES
        assert tail.endswith("00019999\n")
        await child.aclose()
