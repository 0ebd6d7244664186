"""One router per state directory: an exclusive ``flock`` on ``<state_dir>/router.lock``.

``serve`` takes it before anything else touches the directory (the orphan sweep would end the
workers of a router already running there) and holds it for the process lifetime; the kernel
drops it when the process dies, however it dies, so a stale file never blocks a restart. The file
holds the holder's pid, for the refusal message and ``doctor``. It is never unlinked: a second
process may already have it open, and unlinking would let two routers each lock their own inode.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

__all__ = ["LOCK_NAME", "LockStatus", "StateDirLocked", "StateLock", "lock_status"]

LOCK_NAME: Final = "router.lock"
STATE_DIR_MODE: Final = 0o700
LOCK_FILE_MODE: Final = 0o600
_PID_BYTES: Final = 32
PROC_LOCKS: Final = "/proc/locks"


class StateDirLocked(RuntimeError):
    """Another process holds the state directory's lock."""

    def __init__(self, state_dir: Path, pid: int | None) -> None:
        holder = f"pid {pid}" if pid is not None else "an unknown process"
        super().__init__(f"state directory {state_dir} is in use by another router ({holder})")
        self.state_dir = state_dir
        self.pid = pid


@dataclass(frozen=True, slots=True)
class LockStatus:
    path: Path
    held: bool  # some live process holds the lock now
    pid: int | None  # the pid written by the holder (or by the last holder when not held)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class StateLock:
    """``with StateLock(state_dir):`` or ``acquire()`` / ``release()``. Raises StateDirLocked."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> StateLock:
        self.state_dir.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
        # Non-inheritable (the default for os.open): a worker must never keep the router's lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise StateDirLocked(self.state_dir, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> StateLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def lock_status(state_dir: Path) -> LockStatus:
    """Whether a running router holds ``state_dir`` (for ``doctor``). Creates and locks nothing:
    it reads the kernel's lock table, so a router starting at that instant is never refused.
    A missing directory or lock file means no router has it."""
    path = Path(state_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return LockStatus(path, held=False, pid=None)
    try:
        written = _read_pid(fd)
        found = _lock_table_holder(os.fstat(fd))
        if found is not None:
            held, pid = found
            return LockStatus(path, held=held, pid=pid if held else written)
        return LockStatus(path, held=_probe(fd), pid=written)
    finally:
        os.close(fd)


def _lock_table_holder(st: os.stat_result) -> tuple[bool, int | None] | None:
    """(held, pid) from /proc/locks, or None where there is no such table."""
    try:
        table = Path(PROC_LOCKS).read_text()
    except OSError:
        return None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 27578 fe:00:2146673 0 EOF"; a blocked waiter's line has "->".
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key:
            return True, int(fields[4]) if fields[4].isdigit() else None
    return False, None


def _probe(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    return False
