"""Two router nodes ("a", "b") as real `serve` processes behind a shipped balancer configuration."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx

from router.sessions.handshake import CACHE_DIR
from router.sessions.nodes import owner_of
from router.types import HANDSHAKE_VERSIONS
from tests.support.auth import auth_headers
from tests.support.balancer import Balancer, balancer_cluster
from tests.support.client import RawClient
from tests.support.routers import spare_port
from tests.support.serve import ServeProcess, serve_process
from tests.support.wait import wait_for
from workers.orphans import end_processes, processes_for

NODES: Final = ("a", "b")
API_TIMEOUT: Final = 10.0
PROBE_TIMEOUT: Final = 60.0  # a worker started, asked and ended on a loaded machine


def handshakes_cached(state: Path) -> bool:
    """The node's start-up probe has filled its handshake cache: initialize spawns nothing now
    (before, an initialize needs a worker slot and may meet 503 "busy" at a small cap)."""
    for path in (state / CACHE_DIR).glob("handshake-*.json"):
        try:
            versions = json.loads(path.read_text()).get("versions", {})
        except (OSError, ValueError):
            continue
        if set(versions) >= HANDSHAKE_VERSIONS:
            return True
    return False


@dataclass
class Cluster:
    balancer: Balancer
    nodes: dict[str, ServeProcess]
    states: dict[str, Path]

    def live_rows(self, node: str) -> dict[str, dict[str, Any]]:
        """The node's own view (GET /api/sessions, straight to it): session id -> row."""
        answer = httpx.get(
            f"{self.nodes[node].base_url}/api/sessions", headers=auth_headers(), timeout=API_TIMEOUT, trust_env=False
        )
        answer.raise_for_status()
        return {row["id"]: row for row in answer.json()["sessions"]}

    def cluster_view(self, node: str) -> dict[str, Any]:
        """GET /api/cluster/sessions of ``node``: every node's rows, and the silent nodes."""
        answer = httpx.get(f"{self.nodes[node].base_url}/api/cluster/sessions", headers=auth_headers(),
                           timeout=API_TIMEOUT, trust_env=False)  # fmt: skip
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body

    def kill(self, node: str) -> None:
        """SIGKILL, as a host that dies would: the node's workers are orphans, ended here."""
        proc = self.nodes[node].proc
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        end_processes(processes_for(self.states[node]))


OPEN_ATTEMPTS: Final = 50  # least-conn alternates; this many misses in a row means a bug


def open_on(url: str, node: str) -> RawClient:
    """A session through the balancer whose owner is ``node``: handshakes until one lands there."""
    client = RawClient(url)
    for _ in range(OPEN_ATTEMPTS):
        client.session_id = None
        client.initialize()
        if owner_of(client.session_id or "") == node:
            return client
    client.close()
    raise AssertionError(f"no handshake of {OPEN_ATTEMPTS} landed on node {node}")


@contextmanager
def running_cluster(
    tmp: Path, *args: str, browser: str | None = None, balancer: str = "nginx",
    node_args: Mapping[str, Sequence[str]] | None = None,
) -> Iterator[Cluster]:
    """Both nodes with the tests' token (every node of a cluster must take the same one), behind
    ``balancer`` ("nginx" or "haproxy"); ``args`` for both nodes, ``node_args`` for one."""
    with ExitStack() as stack:
        states = {name: tmp / f"node-{name}" for name in NODES}
        # Last out: whatever workers a stopped (or killed) node left.
        stack.callback(lambda: [end_processes(processes_for(state)) for state in states.values()])
        ports = {name: spare_port() for name in NODES}
        # Each node's dashboard lists the whole cluster (GET /api/cluster/sessions).
        peers = [arg for name in NODES for arg in ("--cluster-node", f"http://127.0.0.1:{ports[name]}")]
        nodes = {
            name: stack.enter_context(
                serve_process(
                    states[name], "--node-id", name, "--resume-reserve", "0", *peers, *args,
                    *(node_args or {}).get(name, ()), port=ports[name], browser=browser,
                )
            )
            for name in NODES
        }
        for state in states.values():
            wait_for(partial(handshakes_cached, state), timeout=PROBE_TIMEOUT)
        front = stack.enter_context(balancer_cluster(balancer, [nodes[n].port for n in NODES], tmp / balancer))
        yield Cluster(front, nodes, states)
