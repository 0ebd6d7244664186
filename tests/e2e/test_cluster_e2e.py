"""Two nodes with real @playwright/mcp workers behind deploy/cluster/nginx.conf: ten sessions
spread over both and recorded only by their owner, the Claude-Code-shaped client (its GET stream,
the worker's roots/list and pings across nginx), the Python and TypeScript SDKs; then node "b" is
SIGKILLed: "a"'s sessions go on, "b"'s get 404 and a client that re-initializes browses on "a".
Node a's dashboard lists the whole cluster (--cluster-node)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import pytest
from mcp import Client
from playwright.sync_api import expect, sync_playwright

from router.errors import SESSION_NOT_FOUND
from router.sessions.nodes import owner_of
from tests.e2e.claude_code import ClaudeCodeClient
from tests.support import ROOT, TEST_TOKEN, RawClient, wait_for
from tests.support.cluster import NODES, Cluster, running_cluster

SESSIONS: Final = 10
REQUESTS_EACH: Final = 3  # router-answered (tools/list, ping): cheap, and recorded like any request
# Each node keeps few browsers: the SDK flows need three in all, hibernation makes room beyond.
NODE_ARGS: Final = ("--max-live-workers", "2", "--idle-timeout", "600")
TS_CLIENT: Final = ROOT / "tests" / "e2e" / "ts_client.mjs"
SDK_DIST: Final = ROOT / "workers" / "node_modules" / "@modelcontextprotocol" / "sdk" / "dist"
TS_TIMEOUT: Final = 90.0
RECORD_TIMEOUT: Final = 15.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[Cluster]:
    """Shared by the module; the last test kills node "b"."""
    with running_cluster(tmp_path_factory.mktemp("cluster-e2e"), *NODE_ARGS, browser=chromium) as running:
        yield running


@pytest.fixture(scope="module")
def spread(cluster: Cluster) -> Iterator[list[RawClient]]:
    """Ten sessions opened at once through nginx, each with a few requests."""
    def open_one(_: int) -> RawClient:
        client = RawClient(cluster.balancer.url)
        client.initialize()
        client.request("tools/list")
        client.request("ping")
        client.request("tools/list")
        return client

    with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
        clients = list(pool.map(open_one, range(SESSIONS)))
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def _recorded_on_owner(cluster: Cluster, session_id: str, requests: int) -> None:
    owner = owner_of(session_id)
    assert owner in NODES, session_id
    wait_for(lambda: (cluster.live_rows(owner).get(session_id) or {}).get("requests", 0) >= requests,
             timeout=RECORD_TIMEOUT)  # fmt: skip
    for other in NODES:
        if other != owner:
            assert session_id not in cluster.live_rows(other)


def test_ten_sessions_spread_over_both_nodes_each_recorded_by_its_owner(
    cluster: Cluster, spread: list[RawClient]
) -> None:
    owners = {owner_of(c.session_id or "") for c in spread}
    assert owners == set(NODES), [c.session_id for c in spread]
    for client in spread:
        _recorded_on_owner(cluster, client.session_id or "", REQUESTS_EACH)


def test_claude_code_streams_and_server_requests_cross_nginx(cluster: Cluster, pages: str) -> None:
    with ClaudeCodeClient(cluster.balancer.url) as cc:
        text, _ = cc.call("browser_navigate", url=f"{pages}/second")
        assert "- Page Title: Second" in text
        # The worker asks roots/list on the client's GET stream; the answer comes back by POST.
        status = cc.wait_status(lambda s: s["roots_list_answered"] >= 1 and s["get_stream_open"], timeout=30,
                                what="roots/list answered through nginx")  # fmt: skip
        assert status["requests_seen"].get("roots/list@get", 0) >= 1, status["requests_seen"]
        _recorded_on_owner(cluster, cc.session_id, 1)


async def test_python_sdk_through_nginx(cluster: Cluster, pages: str) -> None:
    async with Client(f"{cluster.balancer.url}?token={TEST_TOKEN}") as client:
        result = await client.call_tool("browser_navigate", {"url": f"{pages}/second"})
        text = "".join(getattr(p, "text", "") for p in result.content)
        assert "- Page Title: Second" in text


def test_typescript_sdk_through_nginx(cluster: Cluster, pages: str) -> None:
    out = subprocess.run(
        ["node", str(TS_CLIENT), str(SDK_DIST), cluster.balancer.url, f"{pages}/second"],
        env={**os.environ, "MCP_ROUTER_TOKEN": TEST_TOKEN},
        capture_output=True, text=True, timeout=TS_TIMEOUT, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert "- Page Title: Second" in answer["text"]
    assert owner_of(answer["sessionId"]) in NODES


def test_a_nodes_dashboard_lists_the_whole_cluster(cluster: Cluster, spread: list[RawClient], chromium: str) -> None:
    base = cluster.nodes["a"].base_url
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{base}/ui/login#token={TEST_TOKEN}")
            expect(page.locator("#status")).to_contain_text("node a (cluster view)")
            for client in spread:  # b's sessions too, shown but left to b's own dashboard
                row = page.locator(f'tr[data-session-id="{client.session_id}"]')
                expect(row).to_have_count(1)
                remote = owner_of(client.session_id or "") != "a"
                expect(row).to_have_class(re.compile(r"\bremote\b" if remote else r"^session( selected)?$"))
        finally:
            browser.close()


def test_node_b_killed_a_goes_on_b_sessions_404_and_reinitialize_lands_on_a(
    cluster: Cluster, spread: list[RawClient], pages: str
) -> None:
    on_a = [c for c in spread if owner_of(c.session_id or "") == "a"]
    on_b = [c for c in spread if owner_of(c.session_id or "") == "b"]
    cluster.kill("b")
    for client in on_a:
        assert client.request("tools/list")["result"]["tools"]
    for client in on_b:
        answer = client.post({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == SESSION_NOT_FOUND
    again = on_b[0]
    again.session_id = None
    again.initialize()  # what Claude Code and the SDKs do after a 404
    assert owner_of(again.session_id or "") == "a"
    assert "- Page Title: Second" in again.text("browser_navigate", url=f"{pages}/second")
