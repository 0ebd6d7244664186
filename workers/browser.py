"""A worker's browser process: found among node's children once Playwright has launched it, and
watched for its exit.

Chromium can die under a node that lives on: the OOM killer picks it (the largest process of a
worker by far), a GPU or sandbox fault takes it down, someone kills it. Playwright MCP then
launches a new browser at the next tool call as if nothing had happened: on ``about:blank``,
without the session's cookies, every ref the model holds unknown. The router must hear of the
death itself: its exit is awaited on a pidfd, the moment it happens, with no polling and
nothing on a call's path.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

import anyio

__all__ = ["BROWSER_FLAG", "BrowserProcess", "browsers_of", "find_browser"]

# Playwright launches every Chromium it drives with this flag (it talks CDP over a pipe); the
# browser's own helpers (renderers, GPU, zygotes) carry --type= and are never node's children.
BROWSER_FLAG: Final = b"--remote-debugging-pipe"
HELPER_FLAG: Final = b"--type="


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``, from every one of its threads (node spawns from a thread of
    its own pool as well as from its main thread)."""
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as fh:
                children += [int(child) for child in fh.read().split()]
        except (OSError, ValueError):
            continue
    return children


def _is_browser(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return BROWSER_FLAG in argv and not any(arg.startswith(HELPER_FLAG) for arg in argv)


def browsers_of(node_pid: int) -> list[int]:
    """Every browser Playwright has running under ``node_pid``: one per worker is the rule, more
    would be a launch race."""
    return [child for child in _children(node_pid) if _is_browser(child)]


def find_browser(node_pid: int) -> int | None:
    """The pid of the browser Playwright launched under ``node_pid``, or None (none launched yet,
    or closed)."""
    return next(iter(browsers_of(node_pid)), None)


class BrowserProcess:
    """A handle on a browser process (a pidfd: the pid cannot name another process meanwhile)
    whose exit can be awaited. Raises OSError when the process is gone already, or the kernel
    has no pidfds (Linux before 5.3): there is then nothing to watch."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd: int | None = os.pidfd_open(pid)

    async def exited(self) -> None:
        """Returns once the process has exited (a pidfd turns readable then, and stays so)."""
        assert self._fd is not None, "closed"
        await anyio.wait_readable(self._fd)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
