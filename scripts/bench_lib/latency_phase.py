"""The latency phase of scripts/bench: tool calls interleaved over every path (the worker used
directly, the routers with and without the record, supergateway, and any variants), their p50/p95
ratios to the direct worker, the CPU per call of each process in between, and the goal: routed ÷
direct on `browser_snapshot`."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench_lib import measure as m
from bench_lib import report
from bench_lib.targets import Env, Target, start_router

ROOT: Final = Path(__file__).resolve().parents[2]
DIRECT, REC, NOREC, SG = "direct", "router", "router-norec", "supergateway"
PATHS: Final = (DIRECT, REC, NOREC, SG)
LABELS: Final = {
    DIRECT: "direct worker",
    REC: "router (recording on)",
    NOREC: "router (`--no-record`)",
    SG: "supergateway `--stateful`",
}
# The goal: what a conversation feels on its most common call, the router as it ships.
GOAL_TOOL: Final = "browser_snapshot"
GOAL_P50: Final = 1.15
GOAL_P95: Final = 1.2


@dataclass
class Started:
    """What the bench started before its latency and init phases."""

    direct: Target
    rec: Target
    norec: Target
    sg: Target | None


@dataclass
class LatencyOutcome:
    lines: list[str] = field(default_factory=list)
    goals: list[report.Goal] = field(default_factory=list)


async def run(a: argparse.Namespace, env: Env, page: str, started: Started, sg_note: str) -> LatencyOutcome:
    targets = [started.direct]
    measured = {k: t for t, k in ((started.rec, REC), (started.norec, NOREC), (started.sg, SG)) if t and k in a.paths}
    targets += measured.values()
    variants: list[Target] = []
    labels = dict(LABELS)  # and the variants'
    for spec in a.variant:
        label, _, rest = spec.partition("=")
        src, *flags = shlex.split(rest) or ["-"]
        labels[label] = f"variant `{label}`"
        variant = start_router(env, label, *flags, src=None if src == "-" else ROOT / src)
        variants.append(variant)
        targets.append(variant)
        measured[label] = variant
    try:
        return await _measure(a, targets, measured, labels, page, sg_note)
    finally:
        for target in variants:
            env.registry.stop(target.child)


async def _measure(
    a: argparse.Namespace,
    targets: list[Target],
    measured: dict[str, Target],
    labels: dict[str, str],
    page: str,
    sg_note: str,
) -> LatencyOutcome:
    await m.quiet("latency")
    m.say(f"latency: {a.iterations} interleaved rounds × {len(a.tools)} tools × {len(targets)} paths")
    lat = await m.latency(
        targets, measured, page, iterations=a.iterations, warmup=a.warmup, tools=a.tools, click_every=a.click_every
    )
    got = LatencyOutcome()
    got.lines += [
        f"### Tool-call latency ({a.iterations} interleaved rounds after {a.warmup} warm-up rounds, "
        f"`browser_click` in every {a.click_every}th; one keep-alive connection per path)",
        "",
    ]
    got.lines += report.latency_table(lat, DIRECT, labels)
    got.lines += [
        "",
        "CPU per call of each process in between (user + system, net of its idle rate): "
        + ", ".join(f"{labels[k]} {v:.2f} ms" for k, v in lat.cpu_ms_per_call.items())
        + ".",
        "",
    ]
    if SG not in lat.samples:
        got.lines += [f"supergateway: {sg_note}.", ""]
    if REC in lat.samples:
        got.goals += _goals(lat, labels)
    return got


def _goals(lat: m.LatencyResult, labels: dict[str, str]) -> list[report.Goal]:
    name = f"{labels[REC]} ÷ direct, `{GOAL_TOOL}`"
    if GOAL_TOOL not in lat.samples[DIRECT]:
        return [
            report.Goal(f"{name}, p{q}", None, limit, note=f"`{GOAL_TOOL}` not among --tools")
            for q, limit in ((50, GOAL_P50), (95, GOAL_P95))
        ]
    goals = []
    for q, limit in ((50, GOAL_P50), (95, GOAL_P95)):
        others = [
            f"{labels[k]}: {report.ratio(lat, DIRECT, k, q, GOAL_TOOL):.3f}×"
            for k in lat.samples
            if k not in (DIRECT, REC)
        ]
        ratio = report.ratio(lat, DIRECT, REC, q, GOAL_TOOL)
        goals.append(report.Goal(f"{name}, p{q}", ratio, limit, note="; ".join(others)))
    return goals
