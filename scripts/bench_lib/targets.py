"""The things measured: a direct Playwright worker, the router (as a real process), supergateway."""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from bench_lib.client import Endpoint
from bench_lib.procs import Registry, Spawned, wait_port

from workers.node import node_executable
from workers.orphans import end_processes, processes_for
from workers.ports import spare_port
from workers.spec import CAPS_FLAG, ROUTER_CAPS

SG_CACHE = Path.home() / ".cache" / "mcp-router-bench"


@dataclass
class Env:
    """Paths shared by every target."""

    root: Path  # the repository
    work: Path  # scratch space for this run (profiles, output dirs, state dirs)
    logs: Path
    browser: str
    cli: Path
    registry: Registry
    router_src: Path | None = None  # run the router from this source tree (a scratch copy)
    router_args: list[str] = field(default_factory=list)
    _n: int = 0

    def fresh_dir(self, name: str) -> Path:
        self._n += 1
        path = self.work / f"{self._n:02d}-{name}"
        path.mkdir(parents=True)
        return path


@dataclass
class Target:
    endpoint: Endpoint
    child: Spawned
    state_dir: Path
    ready_s: float = 0.0


def playwright_args(env: Env, *, port: int | None, profile: Path | None, out: Path, isolated: bool) -> list[str]:
    argv = [node_executable(), str(env.cli)]  # the node the router runs workers on
    if port is not None:
        argv += ["--port", str(port), "--host", "127.0.0.1"]
    argv += ["--headless", "--browser", "chromium", "--executable-path", env.browser]
    if isolated:
        argv.append("--isolated")
    else:
        argv += ["--user-data-dir", str(profile), "--shared-browser-context"]
    argv += ["--output-dir", str(out), CAPS_FLAG, ",".join(ROUTER_CAPS), "--file-paths", "absolute"]
    return argv


def start_worker(env: Env, name: str = "direct") -> Target:
    """A worker started the way the router starts one, addressed with the Host it accepts."""
    base = env.fresh_dir(name)
    port = spare_port()
    argv = playwright_args(env, port=port, profile=base / "profile", out=base / "out", isolated=False)
    child = env.registry.spawn(name, argv, log=env.logs / f"{base.name}.log", state_dir=base, session=name)
    ready = wait_port(port, 20, child)
    return Target(Endpoint(name, f"http://127.0.0.1:{port}/mcp", f"localhost:{port}"), child, base, ready)


def stop_workers(env: Env, workers: list[Target]) -> None:
    """Workers started by ``start_worker``, and the browsers under them: each Chromium runs in a
    session of its own, outside node's group."""
    for worker in workers:
        env.registry.stop(worker.child)
    for worker in workers:
        end_processes(processes_for(worker.state_dir), grace=1.0)


def router_argv(
    env: Env, port: int, state_dir: Path, extra: list[str], src: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    serve = [
        "serve",
        "--port",
        str(port),
        "--state-dir",
        str(state_dir),
        "--idle-timeout",
        "600",
        "--max-sessions",
        "100",
        "--browser",
        env.browser,
    ]  # the default log level (info): each call's log line is part of what a call costs
    serve += env.router_args + extra
    src = src or env.router_src
    entry = env.root / ".venv" / "bin" / "mcp-router"
    if src is None and not entry.exists():
        src = env.root  # a worktree without its own .venv: run this tree with the interpreter we run on
    if src is not None:
        return [sys.executable, "-m", "router.cli", *serve], {"PYTHONPATH": str(src)}
    return [str(entry), *serve], {}


def start_router(
    env: Env, name: str, *extra: str, src: Path | None = None, environ: dict[str, str] | None = None
) -> Target:
    base = env.fresh_dir(name)
    port = spare_port()
    # Our own token in the state dir: this router reads it, an older one ignores it (and the header).
    token = secrets.token_urlsafe(32)
    (base / "token").write_text(token + "\n")
    (base / "token").chmod(0o600)
    argv, extra_env = router_argv(env, port, base, list(extra), src)
    extra_env.update(environ or {})
    env.registry.watch_state_dir(base)  # its workers carry MCP_ROUTER_STATE_DIR=base
    # `python -m` puts the working directory first on sys.path: run from the tree we mean.
    child = env.registry.spawn(
        name, argv, env=extra_env, log=env.logs / f"{base.name}.log", cwd=src or env.router_src or env.root
    )
    start = time.perf_counter()
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if not child.alive():
            raise RuntimeError(f"router {name} exited: {child.log_tail()}")
        if time.perf_counter() - start > 30:
            raise TimeoutError(f"router {name} not healthy after 30 s: {child.log_tail()}")
        time.sleep(0.02)
    endpoint = Endpoint(name, f"http://127.0.0.1:{port}/mcp", token=token)
    return Target(endpoint, child, base, time.perf_counter() - start)


def healthz(target: Target) -> dict[str, object]:
    url = target.endpoint.base + "/healthz"
    try:
        data: dict[str, object] = httpx.get(url, headers=target.endpoint.headers(), timeout=2, trust_env=False).json()
        return data
    except (httpx.HTTPError, ValueError):
        return {}


def router_help(env: Env) -> str:
    argv, extra_env = router_argv(env, 0, env.work, [])
    cmd = [*argv[: argv.index("serve") + 1], "--help"]
    import os

    done = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **extra_env}, timeout=60, cwd=env.router_src or env.root
    )
    return done.stdout + done.stderr


# -- supergateway ---------------------------------------------------------------------------------


def ensure_supergateway(version: str | None) -> tuple[Path | None, str]:
    """(entry point, version or reason) — installed into ~/.cache/mcp-router-bench with npm."""
    entry = SG_CACHE / "node_modules" / "supergateway" / "dist" / "index.js"
    manifest = SG_CACHE / "node_modules" / "supergateway" / "package.json"
    installed = json.loads(manifest.read_text())["version"] if manifest.exists() else None
    try:
        if version is None and installed is None:
            version = subprocess.run(
                ["npm", "view", "supergateway", "version"], capture_output=True, text=True, timeout=60, check=True
            ).stdout.strip()
        if installed is None or (version is not None and installed != version):
            SG_CACHE.mkdir(parents=True, exist_ok=True)
            print(f"bench: npm install supergateway@{version} into {SG_CACHE} …", file=sys.stderr)
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(SG_CACHE), f"supergateway@{version}"],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            installed = json.loads(manifest.read_text())["version"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        return None, f"supergateway could not be installed: {type(exc).__name__}: {str(exc)[:200]}"
    if not entry.exists():
        return None, f"supergateway installed but {entry} is missing"
    return entry, str(installed)


def start_supergateway(env: Env, entry: Path) -> Target:
    base = env.fresh_dir("supergateway")
    port = spare_port()
    stdio = shlex.join(playwright_args(env, port=None, profile=None, out=base / "out", isolated=True))
    argv = [
        "node",
        str(entry),
        "--stdio",
        stdio,
        "--outputTransport",
        "streamableHttp",
        "--stateful",
        "--port",
        str(port),
        "--logLevel",
        "none",
    ]
    child = env.registry.spawn("supergateway", argv, log=env.logs / f"{base.name}.log", state_dir=base)
    ready = wait_port(port, 20, child)
    return Target(Endpoint("supergateway", f"http://127.0.0.1:{port}/mcp"), child, base, ready)
