"""Session ids a balancer can route by (--node-id): minted "<node>.<random>", another node's id
answered 421 naming its owner, this node's unknown ids still 404, and /healthz naming the node."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from router.sessions.nodes import check_node_id, owner_of
from router.sessions.statefiles import MINTED_ID_RE
from router.sessions.table import SESSION_ID_BYTES, check_session_id, mint_session_id
from router.settings import Settings
from tests.support import RawClient, RouterThread, auth_headers, initialize_body, router_settings

MIN_RANDOM_BITS = 128


@pytest.fixture(scope="module")
def node_a(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    with RouterThread(router_settings(tmp_path_factory.mktemp("node-a"), node_id="a", max_sessions=3)) as router:
        yield router


def test_minted_ids_start_with_the_node_and_keep_their_randomness() -> None:
    for _ in range(200):
        session_id = mint_session_id("node-1")
        node, _, random_part = session_id.partition(".")
        assert node == "node-1" and owner_of(session_id) == "node-1"
        assert len(base64.urlsafe_b64decode(random_part + "==")) * 8 >= MIN_RANDOM_BITS
        assert SESSION_ID_BYTES * 8 >= MIN_RANDOM_BITS
        check_session_id(session_id)  # visible ASCII, within the length limit
        assert MINTED_ID_RE.fullmatch(session_id), session_id  # loadable from disk after a restart
    assert owner_of(mint_session_id()) is None


@pytest.mark.parametrize("bad", ["-a", "a.b", "a/b", "x" * 64, "a-", "é"])
def test_node_ids_are_dns_labels(bad: str) -> None:
    with pytest.raises(ValueError):
        check_node_id(bad)
    with pytest.raises(ValueError):  # pydantic's ValidationError is one: `serve` refuses to start
        Settings(node_id=bad)
    assert Settings(node_id="mcp-router-0").node_id == "mcp-router-0"


def test_ids_that_are_not_paths_are_never_minted_shapes() -> None:
    for text in ["../../etc", "a..bcdefghijklmnopqrstu", ".abcdefghijklmnopqrstu", "a.b.cdefghijklmnopqrstu"]:
        assert not MINTED_ID_RE.fullmatch(text)


def test_the_node_mints_its_ids_and_answers_them(node_a: RouterThread) -> None:
    with RawClient(node_a.url) as client:
        client.initialize()
        assert client.session_id is not None and client.session_id.startswith("a.")
        assert "pid=" in client.text("whoami")


def test_another_nodes_id_is_misdirected_naming_the_owner(node_a: RouterThread) -> None:
    with RawClient(node_a.url) as client:
        client.session_id = mint_session_id("b")
        for answer in (
            client.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            client.http.get(client.url, headers=client.headers(accept="text/event-stream")),
            client.http.delete(client.url, headers=client.headers()),
        ):
            assert answer.status_code == 421, answer.text
            error = answer.json()["error"]
            assert error["data"] == {"node": "b", "this_node": "a"}
            assert "'b'" in error["message"]


def test_own_unknown_ids_stay_404(node_a: RouterThread) -> None:
    with RawClient(node_a.url) as client:
        for session_id in (mint_session_id("a"), mint_session_id()):
            client.session_id = session_id
            assert client.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 404


def test_healthz_and_the_api_name_the_node(node_a: RouterThread) -> None:
    public = httpx.get(f"{node_a.base_url}/healthz", trust_env=False)
    assert public.json() == {"status": "ok", "node": "a"}
    full = httpx.get(f"{node_a.base_url}/healthz", headers=auth_headers(), trust_env=False).json()
    assert full["node"] == "a"
    assert full["capacity"] == {"sessions": 3, "workers": node_a.settings.max_live_workers}
    assert isinstance(full["accepting"], bool)
    sessions = httpx.get(f"{node_a.base_url}/api/sessions", headers=auth_headers(), trust_env=False).json()
    assert sessions["node"] == "a"  # the dashboard says whose sessions it shows
    cluster = httpx.get(f"{node_a.base_url}/api/cluster/sessions", headers=auth_headers(), trust_env=False)
    assert cluster.json() == {"configured": False, "node": "a"}  # no --cluster-node: this node alone


def test_a_full_node_turns_initialize_away_with_retry_after(tmp_path: Path) -> None:
    with RouterThread(router_settings(tmp_path / "state", node_id="c", max_sessions=1)) as router:
        with RawClient(router.url) as first, RawClient(router.url) as second:
            first.initialize()
            first.start_worker()  # a session that browsed is never ended to make room
            answer = second.post(initialize_body())
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["retry-after"]) > 0
        health = httpx.get(f"{router.base_url}/healthz", headers=auth_headers(), trust_env=False).json()
        assert health["accepting"] is False
        assert httpx.get(f"{router.base_url}/healthz", trust_env=False).status_code == 200  # not taken out


def test_a_node_restarted_on_its_state_dir_resumes_its_ids(tmp_path: Path) -> None:
    settings = router_settings(tmp_path / "state", node_id="r")
    with RawClient(f"http://127.0.0.1:{settings.port}/mcp") as client:
        with RouterThread(settings):
            client.initialize()
            client.start_worker()
        with RouterThread(settings):  # the id is read back from session.json, node prefix and all
            assert "pid=" in client.text("whoami")
            assert (client.session_id or "").startswith("r.")
