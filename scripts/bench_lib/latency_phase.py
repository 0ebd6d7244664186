"""The latency phase of scripts/bench: tool calls interleaved over every path (the worker used
directly, the routers, supergateway, the floor's bare relays in front of workers started as the
direct one is: in Python, in Node and nginx; and any variants), their p50/p95 ratios to the
direct worker, the CPU per call of each process in between, and an optional py-spy profile of
one router."""

from __future__ import annotations

import argparse
import asyncio
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench_lib import floor, profile, report
from bench_lib import measure as m
from bench_lib.targets import Env, Target, start_router, start_worker, stop_workers

ROOT: Final = Path(__file__).resolve().parents[2]
DIRECT, REC, NOREC, SG = "direct", "router", "router-norec", "supergateway"
RELAY, RELAY_COMMIT, RELAY_NODE, RELAY_NGINX = "relay", "relay-commit", "relay-node", "relay-nginx"
RELAY_RAW, RELAY_RAW_COMMIT = "relay-raw", "relay-raw-commit"
PATHS: Final = (DIRECT, REC, NOREC, SG, RELAY, RELAY_COMMIT, RELAY_RAW, RELAY_RAW_COMMIT, RELAY_NODE, RELAY_NGINX)
LABELS: Final = {
    DIRECT: "direct worker",
    REC: "router (recording on)",
    NOREC: "router (`--no-record`)",
    SG: "supergateway `--stateful`",
    RELAY: "Python relay, nothing else (the floor's)",
    RELAY_COMMIT: "Python relay + one commit per call (the floor's)",
    RELAY_RAW: "Python relay without ASGI, nothing else (the floor's)",
    RELAY_RAW_COMMIT: "Python relay without ASGI + one commit per call (the floor's)",
    RELAY_NODE: "Node relay, nothing else (the floor's)",
    RELAY_NGINX: "nginx relay, nothing else (the floor's)",
}
# The floor's apps (floor_apps.py), each in front of a worker started as the direct one, by path.
RELAY_APPS: Final = {
    RELAY: "relay",
    RELAY_COMMIT: "recording_relay",
    RELAY_RAW: floor.RAW_RELAY,
    RELAY_RAW_COMMIT: floor.RAW_RECORDING_RELAY,
    RELAY_NODE: floor.NODE_RELAY,
    RELAY_NGINX: floor.NGINX_RELAY,
}

NOT_PYTHON: Final = frozenset({SG, RELAY_NODE, RELAY_NGINX})  # measured, but py-spy cannot read them


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
    cpu_ms_per_call: dict[str, float] = field(default_factory=dict)  # by label
    relay_cpu_ms: float | None = None  # the lowest Python relay with a commit: the floor where the router runs
    nginx_cpu_ms: float | None = None  # nginx relaying, nothing else: native code's floor there


async def run(a: argparse.Namespace, env: Env, page: str, started: Started, sg_note: str) -> LatencyOutcome:
    targets = [started.direct]
    targets += [t for t, k in ((started.rec, REC), (started.norec, NOREC), (started.sg, SG)) if t and k in a.paths]
    # supergateway's own node process too (its worker is a child of its own): a Node proxy's CPU.
    measured = {k: t for t, k in ((started.rec, REC), (started.norec, NOREC), (started.sg, SG)) if t and k in a.paths}
    extra: list[Target] = []
    workers: list[Target] = []  # the relays' own
    labels = dict(LABELS)  # and the variants'
    skipped: list[str] = []
    for name, app in RELAY_APPS.items():
        if name not in a.paths:
            continue
        if not floor.available(app):
            skipped.append(labels[name])
            continue
        # A worker of its own, started as the direct one is: two MCP sessions on one worker's
        # shared browser context renumber each other's refs, and the clicks fail.
        worker = start_worker(env, f"{name}-worker")
        relay = floor.in_front_of(env, worker, app, name)
        extra.append(relay)
        workers.append(worker)
        targets.append(relay)
        measured[name] = relay
    for spec in a.variant:
        label, _, rest = spec.partition("=")
        src, *flags = shlex.split(rest) or ["-"]
        labels[label] = f"variant `{label}`"
        variant = start_router(env, label, *flags, src=None if src == "-" else ROOT / src)
        extra.append(variant)
        targets.append(variant)
        measured[label] = variant
    try:
        got = await _measure(a, targets, measured, labels, page, sg_note)
        for label in skipped:
            got.lines += [f"{label}: not installed here; skipped.", ""]
        return got
    finally:
        for target in extra:
            env.registry.stop(target.child)
        stop_workers(env, workers)


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
    got.cpu_ms_per_call = {labels[k]: v for k, v in lat.cpu_ms_per_call.items()}
    got.relay_cpu_ms = lat.cpu_ms_per_call.get(RELAY_RAW_COMMIT, lat.cpu_ms_per_call.get(RELAY_COMMIT))
    got.nginx_cpu_ms = lat.cpu_ms_per_call.get(RELAY_NGINX)
    got.lines += [
        "",
        "CPU per call of each process in between (user + system, net of its idle rate): "
        + ", ".join(f"{labels[k]} {v:.2f} ms" for k, v in lat.cpu_ms_per_call.items())
        + ".",
        "",
    ]
    if SG not in lat.samples:
        got.lines += [f"supergateway: {sg_note}.", ""]
    for name in (k for k in (REC, NOREC) if k in a.paths):
        for q, limit in ((50, 1.05), (95, 1.2)):
            ratio, tool = report.worst_ratio(lat, DIRECT, name, q)
            note = f"worst: `{tool}`"
            for relay in (k for k in RELAY_APPS if k in lat.samples):
                note += f"; {labels[relay].split(' (')[0]}: {report.ratio(lat, DIRECT, relay, q, tool):.3f}×"
            got.goals.append(report.Goal(f"{labels[name]} ÷ direct, p{q} (worst tool)", ratio, limit, note=note))
    if a.profile and (a.profile_path not in measured or a.profile_path in NOT_PYTHON):
        got.lines += [f"Profile: `{a.profile_path}` is no Python process among the latency paths; skipped.", ""]
    elif a.profile:
        got.lines += await _profile(a, measured, labels[a.profile_path], page)
    return got


async def _profile(a: argparse.Namespace, measured: dict[str, Target], label: str, page: str) -> list[str]:
    m.say(f"profile: py-spy on the router for {a.profile:.0f} s of routed calls")
    raw = a.out.parent / "profile-router.txt"
    profiled = measured[a.profile_path]
    spy = profile.start(profiled.child.pid, raw)
    if spy is None:
        return ["Profile: py-spy could not be installed; skipped.", ""]
    await asyncio.sleep(1.0)
    calls = await m.routed_loop(profiled, page, a.profile)
    profile.stop(spy)
    lines = [f"### Router profile (py-spy on {label}, routed tool-call loop)", ""]
    return [*lines, *profile.summary(raw, calls), "", f"Raw collapsed stacks: `{raw}`.", ""]
