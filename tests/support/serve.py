"""`mcp-router` as a real process: `serve` started and stopped around a test, and one-shot commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.auth import seed_token
from tests.support.routers import FAKE_WORKER_COMMAND, ROOT, spare_port
from tests.support.wait import wait_for

CLI = (sys.executable, "-m", "router.cli")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 30.0
CLI_TIMEOUT = 60.0
HEALTH_PROBE_TIMEOUT = 1.0


class OnLoopback:
    """A server on a loopback port (the router, or a balancer in front of routers)."""

    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/mcp"


@dataclass
class ServeProcess(OnLoopback):
    proc: subprocess.Popen[bytes]
    port: int
    log: Path  # the process's stderr: a file, so a chatty router never blocks on a full pipe

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def healthy(self) -> bool:
        try:
            answer = httpx.get(f"{self.base_url}/healthz", timeout=HEALTH_PROBE_TIMEOUT, trust_env=False)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200


@contextmanager
def serve_process(
    state: Path, *args: str, port: int | None = None, browser: str | None = None, seed: bool = True
) -> Iterator[ServeProcess]:
    """`mcp-router serve` on ``state``, healthy before the body runs; SIGTERMed after it unless the
    body ended it. Workers are the stand-in, or real ones with ``browser``; ``args`` go on the
    command line. Its stderr is in ``.log`` (next to the state dir), readable after exit."""
    port = spare_port() if port is None else port
    if seed:  # the tests' token, unless the test is about the router making its own
        seed_token(state)
    argv = [*CLI, "serve", "--port", str(port), "--state-dir", str(state), *args]
    env = dict(os.environ)
    if browser is None:
        env["MCP_ROUTER_WORKER_COMMAND"] = json.dumps(FAKE_WORKER_COMMAND)
    else:
        argv += ["--browser", browser]
    log = state.parent / f"serve-{port}.log"
    with log.open("ab") as sink:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=sink)
    server = ServeProcess(proc, port, log)
    try:
        wait_for(lambda: proc.poll() is not None or server.healthy(), timeout=START_TIMEOUT)
        assert proc.poll() is None, f"serve exited with {proc.returncode}:\n{server.stderr()}"
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(f"serve did not stop on SIGTERM:\n{server.stderr()}") from None


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """A one-shot `mcp-router` command (sessions, show, export, …), its output captured."""
    return subprocess.run(
        [*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False
    )
