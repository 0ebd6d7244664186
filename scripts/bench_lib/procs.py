"""Processes the benchmark starts: each in its own process group, every one ended at exit.

Chromium starts in a session of its own, so a group kill of node misses it; every child gets the
router's marker environment (MCP_ROUTER_STATE_DIR / MCP_ROUTER_SESSION) so that
workers.orphans.processes_for finds the whole tree, Chromium included, both to measure and to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from workers import process_memory
from workers.orphans import ENV_SESSION, ENV_STATE_DIR, end_processes, processes_for

# A settled figure of memory: the median of a few samples, as Chromium maps and frees for a
# moment after a call.
SETTLE_SAMPLES = 5
SETTLE_GAP_S = 0.4


class Spawned:
    """One child process in a new session (its own process group)."""

    def __init__(self, name: str, argv: Sequence[str], *, env: dict[str, str], log: Path, cwd: Path | None = None):
        self.name = name
        self.argv = list(argv)
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            self.argv,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, grace: float = 8.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # stragglers left in the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(2)
        self._log_file.close()


class Registry:
    """Everything started, so that one call ends it all (also on Ctrl-C and exceptions)."""

    def __init__(self) -> None:
        self.children: list[Spawned] = []
        self.state_dirs: list[Path] = []

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        log: Path,
        state_dir: Path | None = None,
        session: str | None = None,
        cwd: Path | None = None,
    ) -> Spawned:
        env = dict(env or {})
        if state_dir is not None:
            self.state_dirs.append(state_dir)
            env[ENV_STATE_DIR] = str(state_dir.resolve())
            env[ENV_SESSION] = session or name
        child = Spawned(name, argv, env=env, log=log, cwd=cwd)
        self.children.append(child)
        return child

    def watch_state_dir(self, state_dir: Path) -> None:
        self.state_dirs.append(state_dir)

    def stop(self, child: Spawned) -> None:
        child.stop()
        with contextlib.suppress(ValueError):
            self.children.remove(child)

    def stop_all(self) -> list[int]:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()
        left: list[int] = []
        for state_dir in dict.fromkeys(self.state_dirs):
            if state_dir.exists():
                left += end_processes(processes_for(state_dir), grace=1.0)
        return left


def wait_port(port: int, timeout: float, child: Spawned | None = None) -> float:
    """Seconds until 127.0.0.1:port accepts a connection."""
    start = time.perf_counter()
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return time.perf_counter() - start
        except OSError:
            pass
        if child is not None and not child.alive():
            raise RuntimeError(f"{child.name} exited: {child.log_tail()}")
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"port {port} not open after {timeout}s")
        time.sleep(0.01)


# -- memory -------------------------------------------------------------------------------------


def pss_kib(pids: Iterable[int]) -> int:
    return process_memory.total_pss(pids) // process_memory.KIB


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def machine_busy_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot (/proc/stat; idle and iowait are not busy)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    total = sum(fields)
    return total - fields[3] - fields[4], total


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_fine(pid: int) -> float:
    """The CPU time of one process's live threads to the nanosecond (the scheduler's own sum, in
    /proc/PID/task/*/sched), for short windows where utime + stime, in 10-ms clock ticks, is too
    coarse: 2 s of an idle router is 0-2 ticks. A thread that ends within the window takes its
    time with it, so this is for quiet windows only; cpu_seconds where the kernel hides it."""
    total = 0.0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        for task in tasks:
            for line in (task / "sched").read_text().splitlines():
                if line.startswith("se.sum_exec_runtime"):
                    total += float(line.split(":")[1]) / 1000.0
                    break
            else:
                return cpu_seconds(pid)
    except OSError:
        return cpu_seconds(pid)
    return total


def pss_uss_kib(pid: int) -> tuple[int, int]:
    """(PSS, USS) of one process in KiB (/proc/PID/smaps_rollup); zeros when it is gone. PSS
    splits shared pages among every process that maps them, other users' Chromiums too, so on a
    busy machine it reads low; USS (pages no other process maps) does not move with what else runs."""
    fields: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                fields[key] = int(rest.split()[0])
    return fields.get("Pss", 0), fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


def memory_kib(pids: Iterable[int]) -> tuple[int, int]:
    """(PSS, USS) in KiB of the processes ``pids``, summed."""
    each = [pss_uss_kib(pid) for pid in pids]
    return sum(p for p, _ in each), sum(u for _, u in each)


async def settled_router_memory(router_pid: int, state_dir: Path) -> tuple[int, int, int]:
    """(PSS KiB, USS KiB, process count) of a router and every process under its state dir
    (workers, Chromium and its helpers): medians of SETTLE_SAMPLES samples SETTLE_GAP_S apart, as
    Chromium maps and frees for a moment after a call."""
    pss, uss, count = [], [], 0
    for _ in range(SETTLE_SAMPLES):
        await asyncio.sleep(SETTLE_GAP_S)
        pids = [router_pid, *processes_for(state_dir)]
        sample = memory_kib(pids)
        pss.append(sample[0])
        uss.append(sample[1])
        count = len(pids)
    return int(statistics.median(pss)), int(statistics.median(uss)), count


def tree_pss(state_dir: Path, session: str | None = None) -> tuple[int, int]:
    """(PSS KiB, process count) of every marked process of one state dir (or one session)."""
    pids = processes_for(state_dir, session)
    return pss_kib(pids), len(pids)


def tree_cpu_seconds(router_pid: int, state_dir: Path) -> float:
    """CPU time of a router and of every worker process (node, Chromium) under its state dir."""
    return sum(cpu_seconds_fine(pid) for pid in [router_pid, *processes_for(state_dir)])


def chromium_count(state_dir: Path) -> int:
    """Browser main processes (not zygotes/renderers/crashpad) started under state_dir."""
    n = 0
    for pid in processes_for(state_dir):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        # Zygote children rewrite their argv into one space-separated string: look at the bytes.
        program = cmdline.split(b"\0")[0].split(b" ")[0]
        if b"chrom" in program and b"crashpad" not in program and b"--type=" not in cmdline:
            n += 1
    return n
