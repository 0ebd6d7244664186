"""deploy/cluster/nginx.conf and haproxy.cfg as shipped, each in front of two nodes ("a", "b") with
the stand-in worker: handshakes spread over both, every later request reaches the session's owner,
a node that is down or unknown gives its sessions a 404 (clients re-initialize), a handshake goes
to a live node."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from router.errors import SESSION_NOT_FOUND
from router.sessions.nodes import owner_of
from tests.support import RawClient, run_cli, wait_for
from tests.support.cluster import NODES, Cluster, open_on, running_cluster

SESSIONS = 10
HANDSHAKES_AFTER_FULL = 6


@pytest.fixture(scope="module", params=["nginx", "haproxy"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Shared by the module's tests for one balancer; the last test kills node "b"."""
    with running_cluster(tmp_path_factory.mktemp("cluster"), balancer=request.param) as running:
        yield running


def _open(url: str) -> RawClient:
    client = RawClient(url)
    client.initialize()
    client.start_worker()
    return client


def test_sessions_spread_and_stay_with_their_owner(cluster: Cluster) -> None:
    with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
        clients = list(pool.map(lambda _: _open(cluster.balancer.url), range(SESSIONS)))
    try:
        owners = {c.session_id: owner_of(c.session_id or "") for c in clients}
        assert set(owners.values()) == set(NODES), owners  # least_conn used both
        with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
            answers = list(pool.map(lambda c: {c.text("whoami") for _ in range(3)}, clients))
        rows = {name: cluster.live_rows(name) for name in NODES}
        for client, texts in zip(clients, answers, strict=True):
            owner = owners[client.session_id] or ""
            row = rows[owner][client.session_id or ""]
            # The stand-in worker names its pid and port: every call ran on the owner's worker.
            assert texts == {f"pid={row['worker_pid']} port={row['worker_port']}"}, (texts, row)
            assert not any(client.session_id in rows[n] for n in NODES if n != owner)
    finally:
        for client in clients:
            client.close()


def test_healthz_through_the_balancer_names_a_node(cluster: Cluster) -> None:
    answer = httpx.get(f"{cluster.balancer.base_url}/healthz", trust_env=False)
    assert answer.status_code == 200 and answer.json()["node"] in NODES


def test_sessions_nodes_lists_the_whole_cluster_and_names_a_silent_node(cluster: Cluster) -> None:
    with open_on(cluster.balancer.url, "b") as client:
        urls = [cluster.nodes[n].base_url for n in NODES]
        state = str(cluster.states["a"])  # its token: the cluster's
        out = run_cli("sessions", "--state-dir", state, "--nodes", ",".join(urls))
        assert out.returncode == 0, out.stderr
        assert client.session_id in out.stdout  # b's session, asked from a's state dir
        assert {"a.", "b."} <= {line[:2] for line in out.stdout.splitlines()}
        silent = run_cli("sessions", "--state-dir", state, "--nodes", f"{urls[0]},http://127.0.0.1:9")
        assert silent.returncode == 1 and "http://127.0.0.1:9 did not answer" in silent.stderr
        view = cluster.cluster_view("a")  # what a's dashboard lists: b's session too
        assert view["configured"] and view["node"] == "a" and view["missing"] == []
        row = next(r for r in view["sessions"] if r["id"] == client.session_id)
        assert row["node"] == urls[1]


def test_a_node_down_or_gone_answers_404_and_handshakes_go_to_a_live_node(cluster: Cluster) -> None:
    with open_on(cluster.balancer.url, "a") as on_a, open_on(cluster.balancer.url, "b") as on_b:
        on_a.start_worker()
        on_b.start_worker()
        cluster.kill("b")

        assert "pid=" in on_a.text("whoami")  # a's sessions go on untouched
        assert cluster.cluster_view("a")["missing"] == [cluster.nodes["b"].base_url]
        # HAProxy marks the node down at the first refused connection (that request gets its 503).
        wait_for(lambda: on_b.post({"jsonrpc": "2.0", "id": 6, "method": "ping"}).status_code == 404, timeout=10)
        for answer in (
            on_b.post({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
            on_b.http.get(on_b.url, headers=on_b.headers(accept="text/event-stream")),
        ):
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["code"] == SESSION_NOT_FOUND
        on_b.session_id = None
        on_b.initialize()  # what the SDKs do after a 404
        assert (on_b.session_id or "").startswith("a.")
        assert "pid=" in on_b.text("whoami")

        on_b.session_id = "zz." + "x" * 32  # a node the balancer does not know
        unknown = on_b.post({"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == SESSION_NOT_FOUND


@pytest.mark.parametrize("balancer", ["nginx", "haproxy"])
def test_a_full_nodes_503_moves_the_handshake_to_another_node(balancer: str, tmp_path: Path) -> None:
    with (
        running_cluster(tmp_path, balancer=balancer, node_args={"a": ("--max-sessions", "1")}) as cluster,
        open_on(cluster.balancer.url, "a") as first,
    ):
        first.start_worker()  # a session that browsed is never ended to make room: a is full
        for _ in range(HANDSHAKES_AFTER_FULL):  # least-conn would send half of them to a
            with RawClient(cluster.balancer.url) as client:
                client.initialize()  # 200 every time: a's 503 was retried on b
                assert owner_of(client.session_id or "") == "b"
