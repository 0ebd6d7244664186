"""The floor under the router's CPU per call, on this machine: what uvicorn costs answering by
itself, relaying through the router's upstream client, and relaying with a parse and one SQLite
commit per call (floor_apps.py); and the same two relays in Python without ASGI, on asyncio
protocols (raw_relay.py), what the hop costs in Python at the least. The router's own figure is
read against these: the part above the last row is the router's sessions, security, record and
continuity, and the ASGI layers it is served through.

Measured here in a loop against a fixed answer, caches stay warm. ``in_front_of`` puts the same
relays in front of a real worker, for the latency rounds: there they run as the router does,
between a worker's calls on cores shared with node and Chromium; there too a bare relay in Node
(node_relay.js, the workers' own node) and nginx (native code, one process) show what the hop
alone costs outside Python."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
from bench_lib import floor_apps
from bench_lib.client import Endpoint
from bench_lib.procs import Spawned, cpu_seconds, wait_port
from bench_lib.targets import Env, Target

from workers.node import node_executable
from workers.ports import spare_port

WARMUP: Final = 300
CALLS: Final = 3000
TOOL_CALL: Final = {"name": "browser_tabs", "arguments": {"action": "list"}}
REQUEST: Final = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": TOOL_CALL}).encode()
HEADERS: Final = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-session-id": "f" * 32,
    "mcp-protocol-version": "2025-06-18",
}
NODE_RELAY: Final = "node"  # node_relay.js: the bare relay outside Python
NODE_RELAY_JS: Final = Path(__file__).with_name("node_relay.js")
RAW_RELAY: Final = "raw"  # raw_relay.py: Python without ASGI, asyncio protocols and httptools
RAW_RECORDING_RELAY: Final = "raw_recording"  # … parsing both bodies, one commit per call
RAW_AHEAD_RELAY: Final = "raw_ahead"  # … parsing both bodies, written ahead, committed in batches
RAW_RELAY_PY: Final = Path(__file__).with_name("raw_relay.py")
BIND_TRIES: Final = 3  # a relay before many workers, its ports picked again if one was taken
ADDRESS_IN_USE: Final = "address already in use"  # Python's and nginx's words for EADDRINUSE
NGINX_RELAY: Final = "nginx"  # nginx as a bare relay: native code, one process (no master)
NGINX_CONF: Final = """daemon off; master_process off; worker_processes 1; pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/f; uwsgi_temp_path {dir}/u; scgi_temp_path {dir}/s;
{servers}}}
"""
NGINX_SERVER: Final = """  upstream worker{upstream} {{ server 127.0.0.1:{upstream}; keepalive 8; }}
  server {{
    listen 127.0.0.1:{port};
    location /mcp {{
      proxy_pass http://worker{upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host localhost:{upstream};
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
"""
APPS: Final = (
    ("uvicorn answering by itself (a worker's fixed answer)", "answer"),
    ("uvicorn relaying through the router's upstream client", "relay"),
    ("… and parsing both bodies, one SQLite WAL commit per call", "recording_relay"),
    ("Python relaying without ASGI (asyncio protocols, httptools: raw_relay.py)", RAW_RELAY),
    ("… and parsing both bodies, one SQLite WAL commit per call", RAW_RECORDING_RELAY),
)


@dataclass
class FloorRow:
    label: str
    cpu_ms_per_call: float
    wall_ms_per_call: float


def in_front_of(env: Env, worker: Target, app: str, name: str) -> Target:
    """The floor's ``app`` (``relay``, ``recording_relay``, ``NODE_RELAY``, ``NGINX_RELAY``, the raw
    relays) before ``worker``."""
    port = spare_port()
    child = _server_for(app)(env, f"{name}-latency", app, port, _port(worker))  # its own log, not the floor phase's
    return Target(Endpoint(name, f"http://127.0.0.1:{port}/mcp"), child, worker.state_dir)


def in_front_of_each(env: Env, workers: list[Target], app: str, name: str) -> list[Target]:
    """One process of ``app`` (a key of ONE_PROCESS_FOR_MANY) before every worker, a port of its
    own for each: what the hop costs one process at N sessions, as the router serves them."""
    for attempt in range(1, BIND_TRIES + 1):
        pairs = [(spare_port(), _port(worker)) for worker in workers]
        try:
            child = ONE_PROCESS_FOR_MANY[app](env, name, app, pairs)
            break
        except RuntimeError as exc:
            # A port picked free was an outgoing connection's by the time the relay bound it (the
            # kernel's ephemeral ports, busy at this load): picked again.
            if attempt == BIND_TRIES or ADDRESS_IN_USE not in str(exc).lower():
                raise
    return [
        Target(Endpoint(f"{name}-{k}", f"http://127.0.0.1:{port}/mcp"), child, worker.state_dir)
        for k, ((port, _), worker) in enumerate(zip(pairs, workers, strict=True))
    ]


def _port(worker: Target) -> int:
    upstream = urllib.parse.urlsplit(worker.endpoint.url).port
    assert upstream is not None, worker.endpoint.url
    return upstream


def _server_for(app: str) -> Callable[[Env, str, str, int, int | None], Spawned]:
    if app in ONE_PROCESS_FOR_MANY:
        many = ONE_PROCESS_FOR_MANY[app]
        return lambda env, name, app, port, upstream: many(env, name, app, [(port, upstream)])
    return _serve_node if app == NODE_RELAY else _serve


def _serve_node(env: Env, name: str, app: str, port: int, upstream: int | None) -> Spawned:
    argv = [node_executable(), str(NODE_RELAY_JS), str(port)]  # the node the router runs workers on
    environ = {floor_apps.UPSTREAM_PORT_ENV: str(upstream)}
    child = env.registry.spawn(name, argv, env=environ, log=env.logs / f"floor-{name}.log")
    wait_port(port, 20, child)
    return child


def _serve_raw(env: Env, name: str, app: str, pairs: list[tuple[int, int | None]]) -> Spawned:
    argv = [sys.executable, str(RAW_RELAY_PY)] + [f"{port}:{up}" if up else str(port) for port, up in pairs]
    if app in (RAW_RECORDING_RELAY, RAW_AHEAD_RELAY):
        flag = "--record" if app == RAW_RECORDING_RELAY else "--record-ahead"
        argv += [flag, str(env.fresh_dir(f"floor-{name}") / "floor.db")]
    child = env.registry.spawn(name, argv, log=env.logs / f"floor-{name}.log")
    for port, _ in pairs:
        wait_port(port, 20, child)
    return child


def available(app: str) -> bool:
    """nginx is not a dependency of the router: its floor is measured where it is installed."""
    return app != NGINX_RELAY or _nginx() is not None


def _nginx() -> str | None:
    return shutil.which("nginx", path=f"{os.environ.get('PATH', '')}:/usr/sbin")  # sbin: not on every PATH


def _serve_nginx(env: Env, name: str, app: str, pairs: list[tuple[int, int | None]]) -> Spawned:
    nginx = _nginx()
    assert nginx is not None
    conf_dir = env.fresh_dir(f"floor-{name}")
    servers = "".join(NGINX_SERVER.format(port=port, upstream=upstream) for port, upstream in pairs)
    (conf_dir / "nginx.conf").write_text(NGINX_CONF.format(dir=conf_dir, servers=servers))
    argv = [nginx, "-p", str(conf_dir), "-c", str(conf_dir / "nginx.conf")]
    child = env.registry.spawn(name, argv, log=env.logs / f"floor-{name}.log")
    for port, _ in pairs:
        wait_port(port, 20, child)
    return child


# The relays that serve many workers from one process (a listening port for each).
ONE_PROCESS_FOR_MANY: Final[dict[str, Callable[[Env, str, str, list[tuple[int, int | None]]], Spawned]]] = {
    RAW_RELAY: _serve_raw,
    RAW_RECORDING_RELAY: _serve_raw,
    RAW_AHEAD_RELAY: _serve_raw,
    NGINX_RELAY: _serve_nginx,
}


def _serve(env: Env, name: str, app: str, port: int, upstream: int | None) -> Spawned:
    argv = [sys.executable, "-m", "uvicorn", f"bench_lib.floor_apps:{app}", "--port", str(port)]
    argv += ["--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log"]
    scripts = env.root / "scripts"
    environ = {"PYTHONPATH": f"{scripts}:{env.router_src or env.root}"}
    if upstream is not None:
        argv.append("--factory")
        environ[floor_apps.UPSTREAM_PORT_ENV] = str(upstream)
        environ[floor_apps.DB_ENV] = str(env.fresh_dir(f"floor-{name}") / "floor.db")
    child = env.registry.spawn(name, argv, env=environ, log=env.logs / f"floor-{name}.log")
    wait_port(port, 20, child)
    return child


def _drive(port: int, pid: int) -> tuple[float, float]:
    with httpx.Client() as client:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(WARMUP):
            client.post(url, content=REQUEST, headers=HEADERS).raise_for_status()
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        for _ in range(CALLS):
            client.post(url, content=REQUEST, headers=HEADERS).raise_for_status()
        return (cpu_seconds(pid) - cpu0) * 1000 / CALLS, (time.perf_counter() - t0) * 1000 / CALLS


def measure(env: Env) -> list[FloorRow]:
    """CPU per call of the serving process (user + system), one keep-alive client, in turn."""
    upstream_port = spare_port()
    upstream = _serve(env, "answer", "answer", upstream_port, None)
    rows: list[FloorRow] = []
    try:
        for label, app in APPS:
            if app == "answer":
                cpu, wall = _drive(upstream_port, upstream.pid)
            else:
                port = spare_port()
                relay = _server_for(app)(env, app, app, port, upstream_port)
                try:
                    cpu, wall = _drive(port, relay.pid)
                finally:
                    env.registry.stop(relay)
            rows.append(FloorRow(label, cpu, wall))
    finally:
        env.registry.stop(upstream)
    return rows


def table(rows: list[FloorRow], router_cpu: dict[str, float]) -> list[str]:
    out = [
        f"### The floor under the router's CPU per call ({CALLS} calls each, one keep-alive client, in turn)",
        "",
        "| serving process | CPU ms per call | wall ms per call |",
        "|---|---:|---:|",
    ]
    out += [f"| {r.label} | {r.cpu_ms_per_call:.3f} | {r.wall_ms_per_call:.3f} |" for r in rows]
    rounds = "the latency rounds above (a real worker; its tools, clicks included)"
    out += [f"| {label}, {rounds} | {cpu:.3f} | — |" for label, cpu in router_cpu.items()]
    return out
