"""Worker processes for mcp-router: one child per session, found and ended reliably.

The names below load their module on first use, not on ``import workers``: importing a light
submodule (workers.memory for the settings' defaults) must not pull in the supervisor, which
the CLI's helper commands never need.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._exceptions import (  # no imports of its own: as cheap eager as lazy
    NoPortAvailable,
    ReadyTimeout,
    SpawnError,
    SupervisorNotRunning,
    WorkerError,
    WorkerExited,
)

if TYPE_CHECKING:
    from .health import RestartBudget
    from .orphans import end_orphans, find_orphans, processes_for
    from .ports import PortAllocator, derive_port
    from .spec import WorkerSpec, default_cli_path, playwright_argv
    from .supervisor import Supervisor, Worker

_HOMES = {
    ".health": ("RestartBudget",),
    ".orphans": ("end_orphans", "find_orphans", "processes_for"),
    ".ports": ("PortAllocator", "derive_port"),
    ".spec": ("WorkerSpec", "default_cli_path", "playwright_argv"),
    ".supervisor": ("Supervisor", "Worker"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)


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
