"""The floor under the router's CPU per call at N sessions: the throughput phase's own loop (each
session a `browser_navigate` + `browser_snapshot` in turn) through one process relaying to N
direct workers, one listening port for each: Python without ASGI, alone, with one commit per
call, and with the router's way of recording (written ahead, committed in batches; raw_relay.py),
and nginx relaying, nothing else. The latency rounds measure the hop with one
session and small answers; here it carries the same sessions, pages and snapshots as the router,
on the same cores shared with N Chromiums, so the router's figure is read against what the hop
alone costs one process at that load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bench_lib import floor
from bench_lib import measure as m
from bench_lib.client import McpSession, new_http
from bench_lib.targets import Env, Target, start_worker, stop_workers

RELAYS: Final = (
    (floor.RAW_RELAY, "Python relay without ASGI, nothing else (raw_relay.py)"),
    (floor.RAW_RECORDING_RELAY, "Python relay without ASGI + one commit per call (raw_relay.py)"),
    (floor.RAW_AHEAD_RELAY, "Python relay without ASGI + written ahead, committed in batches (raw_relay.py)"),
    (floor.NGINX_RELAY, "nginx relaying, nothing else"),
)


@dataclass
class LoadFloorRow:
    label: str
    result: m.ThroughputResult


async def measure(env: Env, page: str, sessions: int, seconds: float) -> list[LoadFloorRow]:
    """Each of RELAYS that is installed, in turn, before the same ``sessions`` direct workers."""
    m.say(f"throughput floor: {sessions} direct workers behind one relaying process, {seconds:.0f} s each")
    workers: list[Target] = []
    rows: list[LoadFloorRow] = []
    try:
        workers = [start_worker(env, f"load-floor-{k}") for k in range(sessions)]
        for app, label in RELAYS:
            if floor.available(app):
                rows.append(LoadFloorRow(label, await _through(env, page, workers, app, seconds)))
    finally:
        stop_workers(env, workers)
    return rows


async def _through(env: Env, page: str, workers: list[Target], app: str, seconds: float) -> m.ThroughputResult:
    relays = floor.in_front_of_each(env, workers, app, f"load-floor-{app}")
    sessions: list[McpSession] = []
    try:
        for relay in relays:
            session = McpSession(relay.endpoint, new_http(2))
            sessions.append(session)
            await session.initialize()
            await session.call("browser_navigate", url=page)
        await m.quiet(f"throughput floor ({app})")
        return await m.throughput(sessions, page, seconds, pid=relays[0].child.pid)
    finally:
        await m.close_sessions(sessions)
        env.registry.stop(relays[0].child)
