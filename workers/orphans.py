"""Find and end worker processes by the marker they carry, including ones a crashed run left.

Verified with @playwright/mcp 0.0.83 + Debian Chromium: Playwright starts Chromium in a *new
session* (its own pgid), so a kill of node's process group never reaches the browser; the two
crashpad handlers double-fork into sessions of their own (parent: pid 1). Chromium's zygote
children rewrite their argv area (setproctitle), which clobbers what /proc/<pid>/environ shows,
so they do not appear to carry the marker. Hence a process belongs to a worker when it carries
the marker, or shares the process group of one that does, or was started with a
``--user-data-dir=`` under our ``sessions/`` directory (catches children whose leader died).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENV_SESSION",
    "ENV_STATE_DIR",
    "end_orphans",
    "end_processes",
    "find_orphans",
    "marker_env",
    "pid_file",
    "processes_for",
    "remove_pid_file",
    "running_workers",
    "write_pid_file",
]

ENV_STATE_DIR = "MCP_ROUTER_STATE_DIR"
ENV_SESSION = "MCP_ROUTER_SESSION"
ORPHAN_GRACE = 2.0  # seconds between SIGTERM and SIGKILL for leftovers
_POLL = 0.02
_PROC = Path("/proc")


def marker_env(state_dir: Path, session_id: str) -> dict[str, str]:
    return {ENV_STATE_DIR: str(state_dir.resolve()), ENV_SESSION: session_id}


def pid_file(state_dir: Path, session_id: str) -> Path:
    return state_dir / "workers" / f"{session_id}.json"


def write_pid_file(state_dir: Path, session_id: str, *, pid: int, pgid: int, port: int) -> Path:
    path = pid_file(state_dir, session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": pid, "pgid": pgid, "port": port, "started": time.time()}))
    tmp.replace(path)  # atomic, so a crash never leaves half a file for the next run to trip on
    return path


def remove_pid_file(state_dir: Path, session_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        pid_file(state_dir, session_id).unlink()


@dataclass(frozen=True)
class _Proc:
    pid: int
    pgid: int
    environ: bytes
    cmdline: bytes


def _scan() -> Iterator[_Proc]:
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        base = _PROC / entry.name
        try:
            stat = (base / "stat").read_text()
            environ = (base / "environ").read_bytes()
            cmdline = (base / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):  # dead, only waiting to be reaped: nothing left to kill
            continue
        yield _Proc(int(entry.name), int(fields[2]), environ, cmdline)


def _own_lineage() -> set[int]:
    """Our pid and ancestors: the router's own env may hold MCP_ROUTER_STATE_DIR (its config)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int((_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids | {1}


def processes_for(state_dir: Path, session_id: str | None = None) -> list[int]:
    """Live pids of every worker process (node, Chromium, helpers) under ``state_dir``.

    With ``session_id``, only that session's. Both markers are required: a shell that merely
    exported MCP_ROUTER_STATE_DIR is not a worker.
    """
    root = str(state_dir.resolve())
    want_dir = f"{ENV_STATE_DIR}={root}".encode()
    want_session = f"{ENV_SESSION}={session_id}".encode() if session_id is not None else None
    session_prefix = f"{ENV_SESSION}=".encode()
    profile_prefix = f"--user-data-dir={root}/sessions/{session_id + '/' if session_id else ''}".encode()
    skip = _own_lineage()
    own_pgid = os.getpgid(0)

    procs = [p for p in _scan() if p.pid not in skip]
    marked: set[int] = set()
    for p in procs:
        env = p.environ.split(b"\0")
        if want_dir not in env:
            continue
        if want_session is not None and want_session not in env:
            continue
        if want_session is None and not any(e.startswith(session_prefix) for e in env):
            continue
        marked.add(p.pid)
    groups = {p.pgid for p in procs if p.pid in marked} - {own_pgid}
    return sorted(
        p.pid
        for p in procs
        if p.pid in marked
        or p.pgid in groups
        or any(arg.startswith(profile_prefix) for arg in p.cmdline.split(b"\0"))
    )


def running_workers(state_dir: Path) -> set[str]:
    """Ids of the workers under ``state_dir`` that still have a process carrying their marker
    (node, and the Chromium it started): how many workers are running, not how many processes."""
    want_dir = f"{ENV_STATE_DIR}={state_dir.resolve()}".encode()
    prefix = f"{ENV_SESSION}=".encode()
    skip = _own_lineage()
    found: set[str] = set()
    for p in _scan():
        env = p.environ.split(b"\0")
        if p.pid not in skip and want_dir in env:
            found |= {e[len(prefix) :].decode(errors="replace") for e in env if e.startswith(prefix)}
    return found


def _alive(pids: Iterable[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive


def _signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def end_processes(
    pids: Iterable[int], *, grace: float = ORPHAN_GRACE, kill_timeout: float = 2.0
) -> list[int]:
    """SIGTERM, wait up to ``grace``, SIGKILL, wait up to ``kill_timeout``. Blocking.

    Returns the pids still alive at the end (normally none; zombies count as dead).
    """
    pending = _alive(pids)
    if not pending:
        return []
    _signal_all(pending, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (pending := _alive(pending)) and time.monotonic() < deadline:
        time.sleep(_POLL)  # polling /proc: there is no way to wait on pids that are not our children
    _signal_all(pending, signal.SIGKILL)
    deadline = time.monotonic() + kill_timeout
    while (pending := _alive(pending)) and time.monotonic() < deadline:
        time.sleep(_POLL)
    return pending


def find_orphans(state_dir: Path) -> list[int]:
    """Worker processes of ``state_dir`` — meant to be called before this run spawned any."""
    return processes_for(state_dir)


def end_orphans(state_dir: Path, *, grace: float = ORPHAN_GRACE) -> list[int]:
    """End what a previous run left behind and remove its pid files; returns the pids found."""
    found = find_orphans(state_dir)
    end_processes(found, grace=grace)
    workers_dir = state_dir / "workers"
    if workers_dir.is_dir():
        for stale in workers_dir.glob("*.json"):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    return found
