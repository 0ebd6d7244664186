"""The `node` phase: the worker's node from spawn to listening, as the router starts it (the pinned
Node 22 with NODE_COMPILE_CACHE, workers/node.py) against plain node from PATH, and whether the
compile cache is filled and used (the first start into an empty cache against the later ones)."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench_lib.measure import say
from bench_lib.targets import Env, playwright_args

from workers.node import COMPILE_CACHE_ENV, PATH_NODE, node_executable
from workers.ports import spare_port

NODE_READY_WITHIN: Final = 30.0
LISTENING: Final = "Listening on"


@dataclass
class NodeStartRow:
    label: str
    wall: list[float] = field(default_factory=list)  # ms, spawn → "Listening on"
    cpu: list[float] = field(default_factory=list)  # ms of CPU the process had used by then
    note: str = ""


def _cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _start_once(env: Env, prefix: list[str], environ: dict[str, str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir=env.work) as scratch:
        base = Path(scratch)
        argv = prefix + playwright_args(env, port=spare_port(), profile=base / "p", out=base / "o", isolated=False)[1:]
        started = time.perf_counter()
        child = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **environ}
        )
        try:
            assert child.stderr is not None
            deadline = started + NODE_READY_WITHIN
            for line in child.stderr:
                if LISTENING in line or time.perf_counter() > deadline:
                    break
            wall = (time.perf_counter() - started) * 1000
            cpu = _cpu_ms(child.pid)
        finally:
            # SIGTERM, as the supervisor stops a worker: node writes its compile cache on the way out.
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return wall, cpu


def _version(node: str) -> str:
    return subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()


def _files(path: Path) -> tuple[int, int]:
    found = [p for p in path.rglob("*") if p.is_file()]
    return len(found), sum(p.stat().st_size for p in found)


def node_starts(env: Env, reps: int, *, v8_compile_cache: Path | None, newer_node: Path | None) -> list[NodeStartRow]:
    """Variants interleaved; the first, untimed round fills the caches. The adopted variant's
    first start is measured apart, each round into a new empty cache: the price of no cache."""
    cache = Path(tempfile.mkdtemp(dir=env.work, prefix="compile-cache-"))
    adopted, plain = node_executable(), PATH_NODE
    adopted_cache = cache / "adopted"
    variants: list[tuple[NodeStartRow, list[str], Callable[[int], dict[str, str]]]] = [
        (NodeStartRow(f"node {_version(plain)} from PATH, no cache (before)"), [plain], lambda k: {}),
        (
            NodeStartRow(f"node {_version(adopted)} + {COMPILE_CACHE_ENV} (as the router starts it)"),
            [adopted],
            lambda k: {COMPILE_CACHE_ENV: str(adopted_cache)},
        ),
        (
            NodeStartRow(f"node {_version(adopted)} + {COMPILE_CACHE_ENV}, first start (empty cache)"),
            [adopted],
            lambda k: {COMPILE_CACHE_ENV: str(cache / f"empty-{k}")},
        ),
        (NodeStartRow(f"node {_version(adopted)}, no cache"), [adopted], lambda k: {}),
    ]
    if v8_compile_cache is not None:
        variants.append(
            (
                NodeStartRow(f"node {_version(plain)} + v8-compile-cache (require hook)"),
                [plain, "-r", str(v8_compile_cache)],
                lambda k: {"V8_COMPILE_CACHE_CACHE_DIR": str(cache / "v8cc")},
            )
        )
    if newer_node is not None:
        variants.append(
            (
                NodeStartRow(f"node {_version(str(newer_node))} + {COMPILE_CACHE_ENV}"),
                [str(newer_node)],
                lambda k: {COMPILE_CACHE_ENV: str(cache / "newer")},
            )
        )
    for k in range(reps + 1):
        for row, prefix, environ in variants:
            wall, cpu = _start_once(env, prefix, environ(k))
            if k:
                row.wall.append(wall)
                row.cpu.append(cpu)
        say(f"  node start {k}/{reps}")
    rows = [row for row, _, _ in variants]
    count, size = _files(adopted_cache)
    rows[1].note = f"the cache: {count} files, {size / 1024:.0f} KiB"
    base = statistics.median(rows[0].cpu) if rows[0].cpu else 0
    for row in rows[1:]:
        if base and row.cpu:
            saved = f"CPU {100 * (1 - statistics.median(row.cpu) / base):+.0f} % saved vs the first row"
            row.note = f"{saved}; {row.note}" if row.note else saved
    return rows


def table(rows: list[NodeStartRow]) -> list[str]:
    out = [
        "### The worker's node start-up (`cli.js` spawned → listening; median of rounds after a cache-filling one)",
        "",
        "| node | n | wall p50 ms | CPU p50 ms | CPU min ms | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for n in rows:
        cpu_min = f"{min(n.cpu):.0f}" if n.cpu else "—"
        wall = f"{statistics.median(n.wall):.0f}" if n.wall else "—"
        cpu = f"{statistics.median(n.cpu):.0f}" if n.cpu else "—"
        out.append(f"| {n.label} | {len(n.wall)} | {wall} | {cpu} | {cpu_min} | {n.note} |")
    return out
