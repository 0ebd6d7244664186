"""Worker processes for mcp-router: one child per session, found and ended reliably."""

from ._exceptions import (
    NoPortAvailable,
    ReadyTimeout,
    SpawnError,
    SupervisorNotRunning,
    WorkerError,
    WorkerExited,
)
from .health import RestartBudget
from .orphans import end_orphans, find_orphans, processes_for
from .ports import PortAllocator, derive_port
from .spec import WorkerSpec, default_cli_path, playwright_argv
from .supervisor import Supervisor, Worker

__all__ = [
    "NoPortAvailable",
    "PortAllocator",
    "ReadyTimeout",
    "RestartBudget",
    "SpawnError",
    "Supervisor",
    "SupervisorNotRunning",
    "Worker",
    "WorkerError",
    "WorkerExited",
    "WorkerSpec",
    "default_cli_path",
    "derive_port",
    "end_orphans",
    "find_orphans",
    "playwright_argv",
    "processes_for",
]
