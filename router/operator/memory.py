"""Memory of each worker's process tree (node, Chromium and its helpers), as PSS.

PSS (proportional set size) splits shared pages between the processes that map them, so the
figures of several workers add up to what they really cost; RSS would count Chromium's shared
libraries once per process. One pass over /proc/*/stat finds every worker's descendants at once
(scanning each process's environ per session, as orphan clean-up does, would cost sessions × procs
file reads per refresh); then one smaps_rollup read per process. Chromium's crashpad handlers
double-fork away from the tree and are not counted: a few MiB each.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import anyio.to_thread

CACHE_SECONDS: Final = 2.0
_PROC = Path("/proc")


def _parents() -> dict[int, list[int]]:
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            stat = (_PROC / entry.name / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        children[int(fields[1])].append(int(entry.name))
    return children


def _tree(root: int, children: Mapping[int, list[int]]) -> list[int]:
    out, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def pss_bytes(pid: int) -> int:
    """PSS of one process from /proc/PID/smaps_rollup; 0 when it is gone or unreadable."""
    try:
        text = (_PROC / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def tree_pss(roots: Mapping[str, int]) -> dict[str, int]:
    """``{session_id: root pid}`` → ``{session_id: PSS bytes of the root and its descendants}``."""
    if not roots:
        return {}
    children = _parents()
    return {sid: sum(pss_bytes(p) for p in _tree(pid, children)) for sid, pid in roots.items()}


class MemorySampler:
    """Caches ``tree_pss`` for a couple of seconds: a dashboard polling every second from two tabs
    must not turn into a /proc scan per request."""

    def __init__(self, ttl: float = CACHE_SECONDS) -> None:
        self.ttl = ttl
        self._at = -float("inf")
        self._roots: dict[str, int] = {}
        self._values: dict[str, int] = {}
        self._lock = anyio.Lock()

    async def sample(self, roots: Mapping[str, int]) -> dict[str, int]:
        async with self._lock:
            fresh = time.monotonic() - self._at < self.ttl
            if not fresh or dict(roots) != self._roots:
                wanted = dict(roots)
                self._values = await anyio.to_thread.run_sync(tree_pss, wanted)
                self._roots, self._at = wanted, time.monotonic()
            return dict(self._values)
