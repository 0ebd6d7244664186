"""Where a routed call's extra time is: the router, or the worker the router runs.

Usage: .venv/bin/python scripts/own_worker.py [--calls 300] [--tool browser_tabs] [router flags…]

Starts a router and a worker started as the bench's direct one, opens a session through the
router, then opens a second MCP session straight on the router's own worker (its port and the
Host it accepts read from its process), and a third on the direct worker. The tool is then
called on each in turn, spaced 20 ms apart as a person's turns are (the order rotating), and the
p50s are printed: the router, its own worker called straight, the direct worker. If the router's
worker called straight matches the direct worker, the router's whole gap is the router process.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]

from bench_lib import measure, targets  # noqa: E402
from bench_lib.client import Endpoint, McpSession, new_http  # noqa: E402
from bench_lib.page import serve_page  # noqa: E402
from bench_lib.procs import Registry  # noqa: E402

from router.settings import find_browser  # noqa: E402
from workers.orphans import processes_for  # noqa: E402
from workers.spec import ALLOWED_HOSTS_ENV  # noqa: E402

GAP_S: Final = 0.02
WARMUP: Final = 20
ROUTER, OWN, DIRECT = "router", "the router's worker, straight", "direct worker"


def worker_address(state_dir: Path) -> tuple[int, str]:
    """The port and accepted Host of the router's worker under ``state_dir``."""
    for pid in processes_for(state_dir):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        hosts = [line.split(b"=", 1)[1] for line in environ if line.startswith(ALLOWED_HOSTS_ENV.encode() + b"=")]
        if b"--port" in argv and hosts:
            return int(argv[argv.index(b"--port") + 1]), hosts[0].decode().split(",")[0]
    raise SystemExit("own_worker: the router's worker was not found")


async def run(env: targets.Env, page: str, calls: int, tool: str, flags: list[str]) -> None:
    router = targets.start_router(env, "router", *flags)
    direct = targets.start_worker(env, "direct")
    http = new_http(4)
    sessions = {ROUTER: McpSession(router.endpoint, http)}
    await measure.open_page(sessions[ROUTER], page)
    port, host = worker_address(router.state_dir)
    sessions[OWN] = McpSession(Endpoint("own", f"http://127.0.0.1:{port}/mcp", host), http)
    sessions[DIRECT] = McpSession(direct.endpoint, http)
    for name in (OWN, DIRECT):
        await measure.open_page(sessions[name], page)
    args = measure.tool_args(tool, "")
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for round_ in range(WARMUP + calls):
        order = list(sessions.items())
        order = order[round_ % 3:] + order[: round_ % 3]
        for name, session in order:
            started = time.perf_counter()
            await session.call(tool, **args)
            if round_ >= WARMUP:
                times[name].append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(GAP_S)
    base = statistics.median(times[DIRECT])
    print(f"| `{tool}`, {calls} rounds | p50 ms | ÷ direct |\n|---|---:|---:|")
    for name, values in times.items():
        p50 = statistics.median(values)
        print(f"| {name} | {p50:.2f} | {p50 / base:.3f} |")
    await http.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--tool", default="browser_tabs")
    args, flags = parser.parse_known_args()
    work = Path(tempfile.mkdtemp(prefix="own-worker-"))
    registry = Registry()
    env = targets.Env(
        root=ROOT, work=work, logs=work / "logs", browser=find_browser() or "chromium",
        cli=ROOT / "workers/node_modules/@playwright/mcp/cli.js", registry=registry, router_src=ROOT,
    )  # fmt: skip
    env.logs.mkdir()
    try:
        with serve_page() as base:
            asyncio.run(run(env, base + "/", args.calls, args.tool, flags))
    finally:
        registry.stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
