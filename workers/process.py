"""One child process in its own session and process group, with a bounded stderr tail.

The group is the unit of termination: SIGTERM to the group lets node close its browser cleanly,
SIGKILL to the group after the grace period catches anything that ignored it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import anyio.abc

__all__ = ["STDERR_TAIL_BYTES", "ChildProcess", "group_listens_on", "group_members"]

STDERR_TAIL_BYTES = 8 * 1024
KILL_REAP_TIMEOUT = 5.0  # after SIGKILL the kernel frees a process fast; longer means something is wrong
GROUP_EMPTY_TIMEOUT = 2.0  # how long to wait for group members we cannot waitpid() for
STDERR_DRAIN_TIMEOUT = 0.5  # stderr may be held open by a grandchild; never wait for it long
_POLL = 0.02


def group_members(pgid: int) -> list[int]:
    """Live pids in process group ``pgid`` (zombies excluded: they are already dead)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []  # nobody, not even a zombie: spares reading every /proc/*/stat
    except PermissionError:
        pass  # someone is there (not ours to signal): look
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            # cols[1] is "ADDR:PORT" in hex, cols[3] the state (0A = LISTEN), cols[9] the inode
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def group_listens_on(pgid: int, port: int) -> bool:
    """True when a process of group ``pgid`` holds a listening socket on ``port``.

    A bare TCP connect is not proof of readiness: a foreign process that won the port in a bind
    race also accepts, while our child is about to die of EADDRINUSE.
    """
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in group_members(pgid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
            except OSError:
                continue
    return False


class ChildProcess:
    """Start with :meth:`start` inside a task group that will run :meth:`pump_stderr`."""

    def __init__(self, process: anyio.abc.Process, argv: Sequence[str]) -> None:
        self._process = process
        self.argv = tuple(argv)
        self.pid = process.pid
        self.pgid = process.pid  # start_new_session makes the child leader of its own group
        self._tail = bytearray()
        self._stderr_done = anyio.Event()

    @classmethod
    async def start(
        cls, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None
    ) -> ChildProcess:
        """Raises OSError when the executable cannot be started."""
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # nobody reads it; a full pipe would stall the child
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        return cls(process, argv)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def alive(self) -> bool:
        return self._process.returncode is None

    def stderr_tail(self) -> str:
        return self._tail.decode("utf-8", errors="replace")

    async def pump_stderr(self) -> None:
        """Read stderr to EOF, keeping only the last STDERR_TAIL_BYTES."""
        stream = self._process.stderr
        try:
            if stream is not None:
                with contextlib.suppress(
                    anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError
                ):
                    async for chunk in stream:
                        self._tail += chunk
                        if len(self._tail) > STDERR_TAIL_BYTES:
                            del self._tail[: len(self._tail) - STDERR_TAIL_BYTES]
        finally:
            self._stderr_done.set()

    async def drain_stderr(self, patience: float = STDERR_DRAIN_TIMEOUT) -> None:
        """Give the stderr pump a moment to catch the child's last words after it exited."""
        with anyio.move_on_after(patience):
            await self._stderr_done.wait()

    async def wait(self) -> int:
        return await self._process.wait()

    def signal_group(self, sig: signal.Signals) -> None:
        # killpg even after the leader died: members may linger, and the pgid cannot be reused
        # while any of them lives.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    async def terminate(self, grace: float) -> int:
        """SIGTERM the group, wait up to ``grace``, SIGKILL the group, reap; returns the returncode."""
        if self.alive() or group_members(self.pgid):
            self.signal_group(signal.SIGTERM)
            with anyio.move_on_after(grace):
                await self._wait_group_empty()
            self.signal_group(signal.SIGKILL)
        with anyio.fail_after(KILL_REAP_TIMEOUT):
            returncode = await self.wait()
        with anyio.move_on_after(GROUP_EMPTY_TIMEOUT):
            await self._wait_group_empty()
        return returncode

    async def _wait_group_empty(self) -> None:
        await self.wait()
        # Members are not our children, so nothing signals their end: /proc polling is all we have.
        while group_members(self.pgid):  # noqa: ASYNC110
            await anyio.sleep(_POLL)

    async def aclose(self) -> None:
        """Release the pipe and transport (a ResourceWarning otherwise). Call after exit."""
        with anyio.CancelScope(shield=True):
            await self._process.aclose()
