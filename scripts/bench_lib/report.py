"""The Markdown report: tables and goals (PASS/MISS with margins)."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench_lib.measure import InitResult, LatencyResult, MemoryRow, ThroughputResult, med_ms, pct

from workers.memory import host_memory
from workers.node import node_executable

MIB = 1024


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):  # noqa: SIM115
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = (host_memory().total() or 0) // 1024
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    worker_node = subprocess.run([node_executable(), "--version"], capture_output=True, text=True).stdout.strip()
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem_kib / MIB / MIB:.1f} GiB RAM, Linux {platform.release()}, "
        f"Python {platform.python_version()}, Node {node} (workers: {worker_node})"
    )


@dataclass
class Goal:
    name: str
    measured: float | None
    limit: float
    unit: str = "×"
    note: str = ""

    def row(self) -> str:
        if self.measured is None:
            return f"| {self.name} | — | ≤ {self.limit:g}{self.unit} | SKIP | {self.note} |"
        ok = self.measured <= self.limit
        if self.limit == 0:
            margin = "none to spare" if ok else f"{self.measured:g} over"
        else:
            rel = (self.limit - self.measured) / self.limit * 100
            margin = f"{rel:.1f}% headroom" if ok else f"missed by {-rel:.1f}%"
        fmt = f"{self.measured:.3f}" if self.unit == "×" else f"{self.measured:.2f}"
        note = f"; {self.note}" if self.note else ""
        verdict = "PASS" if ok else "MISS"
        return f"| {self.name} | {fmt}{self.unit} | ≤ {self.limit:g}{self.unit} | {verdict} | {margin}{note} |"


def latency_table(lat: LatencyResult, direct: str, labels: dict[str, str]) -> list[str]:
    lines = [
        "| tool | path | p50 ms | p95 ms | mean ms | p50 ÷ direct | p95 ÷ direct |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for tool in lat.samples[direct]:
        d = lat.samples[direct][tool]
        for name, by_tool in lat.samples.items():
            s = by_tool[tool]
            mean = sum(s) / len(s) * 1000
            r50 = pct(s, 50) / pct(d, 50)
            r95 = pct(s, 95) / pct(d, 95)
            ratios = "—" if name == direct else f"{r50:.3f}"
            ratios95 = "—" if name == direct else f"{r95:.3f}"
            lines.append(
                f"| `{tool}` | {labels.get(name, name)} | {pct(s, 50):.2f} | {pct(s, 95):.2f} | {mean:.2f} "
                f"| {ratios} | {ratios95} |"
            )
    return lines


def ratio(lat: LatencyResult, direct: str, name: str, q: float, tool: str) -> float:
    return pct(lat.samples[name][tool], q) / pct(lat.samples[direct][tool], q)


def init_table(rows: dict[str, InitResult]) -> list[str]:
    lines = [
        "| path | n | `initialize` ms (median) | first `browser_navigate` ms | steady `browser_navigate` ms "
        "| first ÷ steady | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, r in rows.items():
        if not r.init:
            lines.append(f"| {label} | 0 | — | — | — | — | {r.note} |")
            continue
        ratio = med_ms(r.first) / med_ms(r.steady) if r.steady else float("nan")
        lines.append(
            f"| {label} | {len(r.init)} | {med_ms(r.init):.1f} | {med_ms(r.first):.1f} | "
            f"{med_ms(r.steady):.1f} | {ratio:.2f} | {r.note} |"
        )
    return lines


def memory_table(rows: list[MemoryRow]) -> list[str]:
    lines = [
        "| sessions | kind | router RSS MiB | worker processes | worker PSS total MiB | PSS per session MiB |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.sessions} | {r.kind} | {r.router_rss_kib / MIB:.1f} | {r.worker_procs} | "
            f"{r.worker_pss_kib / MIB:.0f} | {r.per_session_pss_kib / MIB:.1f} |"
        )
    return lines


def throughput_table(results: list[ThroughputResult], labels: list[str] | None = None) -> list[str]:
    """One row per run; ``labels`` (one per result) add a first column naming each run."""
    head = (
        "| sessions | seconds | calls | calls/s | errors | p50 ms | p95 ms | router CPU ms per call "
        "| router CPU ms/s idle |"
    )
    rule = "|---:|---:|---:|---:|---|---:|---:|---:|---:|"
    lines = [f"| router {head}", f"|---{rule}"] if labels else [head, rule]
    for k, t in enumerate(results):
        p50 = f"{pct(t.latencies, 50):.0f}" if t.latencies else "—"
        p95 = f"{pct(t.latencies, 95):.0f}" if t.latencies else "—"
        err = f"{t.errors} ({t.first_error})" if t.errors else "0"
        cpu = f"{t.cpu_ms_per_call:.2f}" if t.cpu_ms_per_call is not None else "—"
        idle = f"{t.idle_cpu_ms_per_s:.1f}" if t.idle_cpu_ms_per_s is not None else "—"
        rate = t.calls / t.seconds if t.seconds else 0.0
        label = f"| {labels[k]} " if labels else ""
        lines.append(
            f"{label}| {t.sessions} | {t.seconds:.1f} | {t.calls} | {rate:.1f} | {err} | {p50} | {p95} "
            f"| {cpu} | {idle} |"
        )
    return lines


def header(columns: Sequence[str], text_columns: int = 1) -> list[str]:
    """A Markdown table's header and rule: the first ``text_columns`` left-aligned, the figures right."""
    rule = ["---"] * text_columns + ["---:"] * (len(columns) - text_columns)
    return [f"| {' | '.join(columns)} |", f"|{'|'.join(rule)}|"]


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes, as `uptime` shows it."""
    return ", ".join(Path("/proc/loadavg").read_text().split()[:3])
