"""Two router nodes ("a", "b") as real `serve` processes behind deploy/cluster/nginx.conf."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from tests.support.auth import auth_headers
from tests.support.balancer import Nginx, nginx_cluster
from tests.support.serve import ServeProcess, serve_process
from workers.orphans import end_processes, processes_for

NODES: Final = ("a", "b")
API_TIMEOUT: Final = 10.0


@dataclass
class Cluster:
    nginx: Nginx
    nodes: dict[str, ServeProcess]
    states: dict[str, Path]

    def live_rows(self, node: str) -> dict[str, dict[str, Any]]:
        """The node's own view (GET /api/sessions, straight to it): session id -> row."""
        answer = httpx.get(
            f"{self.nodes[node].base_url}/api/sessions", headers=auth_headers(), timeout=API_TIMEOUT, trust_env=False
        )
        answer.raise_for_status()
        return {row["id"]: row for row in answer.json()["sessions"]}

    def kill(self, node: str) -> None:
        """SIGKILL, as a host that dies would: the node's workers are orphans, ended here."""
        proc = self.nodes[node].proc
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        end_processes(processes_for(self.states[node]))


@contextmanager
def running_cluster(tmp: Path, *args: str, browser: str | None = None) -> Iterator[Cluster]:
    """Both nodes with the tests' token (every node of a cluster must take the same one)."""
    with ExitStack() as stack:
        states = {name: tmp / f"node-{name}" for name in NODES}
        # Last out: whatever workers a stopped (or killed) node left.
        stack.callback(lambda: [end_processes(processes_for(state)) for state in states.values()])
        nodes = {
            name: stack.enter_context(
                serve_process(states[name], "--node-id", name, "--resume-reserve", "0", *args, browser=browser)
            )
            for name in NODES
        }
        nginx = stack.enter_context(nginx_cluster([nodes[n].port for n in NODES], tmp / "nginx"))
        yield Cluster(nginx, nodes, states)
