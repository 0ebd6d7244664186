"""Memory of processes as PSS, and of each worker's whole process tree (node, Chromium and its
helpers).

PSS (proportional set size) splits shared pages between the processes that map them, so the
figures of several workers add up to what they really cost; RSS would count Chromium's shared
libraries once per process. One pass over /proc/*/stat finds every worker's descendants at once
(scanning each process's environ per session, as orphan clean-up does, would cost sessions × procs
file reads per refresh); then one smaps_rollup read per process. Chromium's crashpad handlers
double-fork away from the tree and are not counted: a few MiB each.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

__all__ = ["children_by_parent", "pss_bytes", "total_pss", "tree_pids", "tree_pss"]

_PROC: Final = Path("/proc")
KIB: Final = 1024


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, from one pass over /proc/*/stat."""
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


def tree_pids(root: int, children: Mapping[int, list[int]]) -> list[int]:
    """``root`` and all its descendants."""
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
            return int(line.split()[1]) * KIB
    return 0


def total_pss(pids: Iterable[int]) -> int:
    return sum(pss_bytes(pid) for pid in pids)


def tree_pss(roots: Mapping[str, int]) -> dict[str, int]:
    """``{worker id: root pid}`` → ``{worker id: PSS bytes of the root and its descendants}``."""
    if not roots:
        return {}
    children = children_by_parent()
    return {key: total_pss(tree_pids(pid, children)) for key, pid in roots.items()}
