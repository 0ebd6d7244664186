"""Errors raised by the ``workers`` package.

The tree, in the httpx style, so callers can catch as broadly or narrowly as they need::

    WorkerError                  anything this package raises on purpose
    ├── SpawnError               a worker could not be brought up (router: 503 + stderr tail)
    │   ├── ReadyTimeout         the child lived but its port stayed silent for ready_timeout
    │   └── NoPortAvailable      every port of the range is held or not bindable
    ├── WorkerExited             a worker that was up has gone (returncode, stderr tail)
    └── SupervisorNotRunning     spawn() called outside ``async with supervisor.run()``
"""

from __future__ import annotations

__all__ = [
    "NoPortAvailable",
    "ReadyTimeout",
    "SpawnError",
    "SupervisorNotRunning",
    "WorkerError",
    "WorkerExited",
]


class WorkerError(Exception):
    """Base class of every error this package raises on purpose."""


class SpawnError(WorkerError):
    """A worker could not be started or never became ready.

    ``stderr_tail`` is what the child wrote last (often the only clue: missing browser, bad flag);
    ``returncode`` is None when the child was still alive (we killed it) or never started.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        stderr_tail: str = "",
        returncode: int | None = None,
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.stderr_tail = stderr_tail
        self.returncode = returncode


class ReadyTimeout(SpawnError):
    """The child stayed alive but did not accept TCP on its port in time; it has been killed."""


class NoPortAvailable(SpawnError):
    """No port of the worker range is free; a SpawnError so the router needs one ``except``."""


class WorkerExited(WorkerError):
    """A worker that had been ready is gone."""

    def __init__(self, message: str, *, session_id: str, returncode: int, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.session_id = session_id
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class SupervisorNotRunning(WorkerError):
    """The supervisor's task group is not open, so it cannot watch a new child."""
