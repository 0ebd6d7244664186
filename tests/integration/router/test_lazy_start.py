"""Lazy start, with the stand-in worker: a handshake spawns nothing, the first worker-bound call does.

``initialize``, ``notifications/initialized``, ``tools/list`` and ``ping`` are answered from the
handshake cache, and those answers are the worker's own (plus the router's tools). The client's
``initialize`` params reach every worker the session gets, before its first forwarded call.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from router.catalog.answers import Catalog
from router.record.tools import DEFINITIONS
from tests.support import (
    ACCEPT_BOTH,
    FAKE_WORKER,
    RawClient,
    RouterThread,
    messages_of,
    router_settings,
    spare_port,
    wait_for,
)
from workers.orphans import processes_for

VERSION: Final = "2025-06-18"
CLIENT_CAPABILITIES: Final = {"roots": {"listChanged": True}}
CLIENT_INFO: Final = {"name": "lazy-test-client", "version": "7.1"}


def accepts_connections(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def direct_worker(script: Path = FAKE_WORKER) -> Iterator[str]:
    """The stand-in worker run on its own, no router: the reference for what it answers."""
    port = spare_port()
    process = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: accepts_connections(port) or process.poll() is not None, timeout=15)
        assert process.poll() is None, "the stand-in worker did not start"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def direct_handshake(url: str, version: str = VERSION) -> tuple[dict[str, Any], dict[str, Any]]:
    """The worker's own ``initialize`` and ``tools/list`` results."""
    with httpx.Client(timeout=15, trust_env=False) as http:
        headers = {"content-type": "application/json", "accept": ACCEPT_BOTH}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO},
        }
        first = http.post(url, json=body, headers=headers)
        assert first.status_code == 200, first.text
        headers["mcp-session-id"] = first.headers["mcp-session-id"]
        headers["mcp-protocol-version"] = version
        note = http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        assert note.status_code == 202, note.text
        listed = http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)
        assert listed.status_code == 200, listed.text
        http.delete(url, headers=headers)
    return messages_of(first)[-1]["result"], messages_of(listed)[-1]["result"]


def initialize_with_roots(c: RawClient, version: str = VERSION) -> dict[str, Any]:
    """Like RawClient.initialize, with the capabilities and client info of a real client."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO},
    }
    response = c.post(body)
    assert response.status_code == 200, response.text
    c.session_id = response.headers["mcp-session-id"]
    assert c.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    answer: dict[str, Any] = messages_of(response)[-1]
    return answer


def worker_pid(c: RawClient) -> str:
    return c.text("whoami").split()[0]


@pytest.fixture(scope="module")
def reference() -> tuple[dict[str, Any], dict[str, Any]]:
    """What the stand-in worker itself answers to ``initialize`` and ``tools/list``."""
    with direct_worker() as url:
        return direct_handshake(url)


def test_handshake_and_listing_start_no_worker_and_match_the_worker(
    fake_router: RouterThread, reference: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    worker_initialize, worker_tools = reference
    state = Path(fake_router.settings.state_dir)
    with RawClient(fake_router.url) as c:
        answer = c.initialize(version=VERSION)
        sid = c.session_id or ""
        # The worker's answer, plus the resources and prompts the router serves itself.
        assert messages_of(answer)[-1]["result"] == Catalog.with_capabilities(copy.deepcopy(worker_initialize))
        listed = c.request("tools/list")
        assert c.request("ping")["result"] == {}
        roots_changed = c.post({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        assert roots_changed.status_code == 202
        assert not processes_for(state, sid), "the handshake alone starts no worker"
        assert fake_router.manager.sessions.get(sid).connection is None
        # The worker's tools, in its order, then the router's.
        expected = {**worker_tools, "tools": [*worker_tools["tools"], *DEFINITIONS]}
        assert listed["result"] == json.loads(json.dumps(expected))
        # A router tool is the router's to answer: still no worker.
        assert "result" in c.call("get_content", ref_id="nothing-yet")
        assert not processes_for(state, sid)
        # The first call the worker must answer starts it.
        assert c.text("echo", text="first") == "first"
        assert processes_for(state, sid)
        # A live worker answers tools/list itself, with the same result.
        assert c.request("tools/list")["result"] == listed["result"]
        assert c.delete().status_code == 200
        wait_for(lambda: not processes_for(state, sid), timeout=10)


@contextmanager
def reaping_after(router: RouterThread, seconds: float) -> Iterator[None]:
    """The shared router reaps idle workers after ``seconds`` for the length of a test."""
    before = router.manager.upkeep.idle_timeout
    router.manager.upkeep.idle_timeout = seconds
    try:
        yield
    finally:
        router.manager.upkeep.idle_timeout = before


def test_client_initialize_is_replayed_on_every_worker(fake_router: RouterThread) -> None:
    state = Path(fake_router.settings.state_dir)
    with RawClient(fake_router.url) as c, reaping_after(fake_router, 1.0):
        initialize_with_roots(c)
        sid = c.session_id or ""
        seen = json.loads(c.text("client_params"))
        assert seen["clientInfo"] == CLIENT_INFO
        assert seen["capabilities"].get("roots") == CLIENT_CAPABILITIES["roots"]
        assert seen["protocolVersion"] == VERSION
        first_pid = worker_pid(c)
        wait_for(lambda: not processes_for(state, sid), timeout=10)  # reaped as idle
        assert fake_router.manager.sessions.get(sid).connection is None
        # A dormant session's listing and pings are the router's to answer too.
        assert [t["name"] for t in c.request("tools/list")["result"]["tools"]][:2] == ["echo", "whoami"]
        assert c.request("ping")["result"] == {}
        assert not processes_for(state, sid)
        # The next call is the new worker's first: it sees the client's own handshake again.
        again = json.loads(c.text("client_params"))
        assert again["clientInfo"] == CLIENT_INFO
        assert again["capabilities"].get("roots") == CLIENT_CAPABILITIES["roots"]
        assert worker_pid(c) != first_pid
        assert c.delete().status_code == 200


@pytest.mark.parametrize("tool", ["get_content", "get_console_content"])
def test_router_tools_never_start_a_worker(fake_router: RouterThread, tool: str) -> None:
    state = Path(fake_router.settings.state_dir)
    with RawClient(fake_router.url) as c:
        c.initialize()
        answer = c.call(tool, ref_id="nothing-yet")
        assert "result" in answer, answer
        assert not processes_for(state, c.session_id)
        # A session that never had a worker ends like any other.
        assert c.delete().status_code == 200
        assert c.post({"jsonrpc": "2.0", "id": 9, "method": "ping"}).status_code == 404


@pytest.mark.parametrize(
    "params",
    [
        {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "no-version"}},
        {"protocolVersion": VERSION, "capabilities": {}},
        {"protocolVersion": VERSION, "clientInfo": CLIENT_INFO},
        {"protocolVersion": 20250618, "capabilities": {}, "clientInfo": CLIENT_INFO},
        {"capabilities": {}, "clientInfo": CLIENT_INFO},
    ],
)
def test_an_initialize_the_worker_would_refuse_is_refused_at_once(
    fake_router: RouterThread, params: dict[str, Any]
) -> None:
    """Not accepted from the cache only for every later call to fail on the replay."""
    state = Path(fake_router.settings.state_dir)
    before = len(fake_router.manager.sessions)
    with RawClient(fake_router.url) as c:
        response = c.post({"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": params})
        assert response.status_code == 400, response.text
        assert "mcp-session-id" not in response.headers
        error = response.json()
        assert error["id"] == 5 and error["error"]["code"] == -32602, error
    assert len(fake_router.manager.sessions) == before
    assert not processes_for(state)


def test_a_worker_that_forgets_the_session_gets_the_handshake_again(fake_router: RouterThread) -> None:
    """The worker ends the client's MCP session but lives on: the router opens a new one there,
    with the client's own params, and the call goes through on the same worker."""
    with RawClient(fake_router.url) as c:
        initialize_with_roots(c)
        pid = worker_pid(c)
        session = fake_router.manager.sessions.get(c.session_id)
        connection, forgotten = session.connection, session.worker_session_id
        headers = {"host": connection.host_header, "mcp-session-id": forgotten}
        assert httpx.delete(connection.url, headers=headers, timeout=10, trust_env=False).status_code == 200
        seen = json.loads(c.text("client_params"))
        assert seen["clientInfo"]["name"] == CLIENT_INFO["name"]
        assert seen["capabilities"].get("roots") == CLIENT_CAPABILITIES["roots"]
        assert session.connection is connection, "the same worker, not a new one"
        assert session.worker_session_id not in (None, forgotten)
        assert worker_pid(c) == pid
        assert c.delete().status_code == 200


def test_concurrent_first_calls_share_one_worker(fake_router: RouterThread) -> None:
    state = Path(fake_router.settings.state_dir)
    with RawClient(fake_router.url) as c:
        c.initialize()
        sid = c.session_id or ""

        def call(index: int) -> str:
            with RawClient(fake_router.url) as other:
                other.session_id = sid
                body = {"jsonrpc": "2.0", "id": f"concurrent-{index}", "method": "tools/call"}
                response = other.post({**body, "params": {"name": "whoami", "arguments": {}}})
                assert response.status_code == 200, response.text
                answer = messages_of(response)[-1]
                assert answer["id"] == body["id"], answer
                return str(answer["result"]["content"][0]["text"])

        with ThreadPoolExecutor(max_workers=4) as pool:
            answers = list(pool.map(call, range(4)))
        assert len(set(answers)) == 1, answers
        assert len(processes_for(state, sid)) == 1
        assert c.delete().status_code == 200


def test_a_session_from_a_previous_run_starts_lazily_with_its_own_handshake(state_dir: Path) -> None:
    """After a restart of the router the id still works: listed without a worker, and the first
    call's worker is given the client's handshake as recorded."""
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as c:
        initialize_with_roots(c)
        c.start_worker()
        sid = c.session_id or ""
    assert not processes_for(state_dir, sid)
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as c:
        c.session_id = sid
        assert "echo" in [t["name"] for t in c.request("tools/list")["result"]["tools"]]
        assert c.request("ping")["result"] == {}
        assert not processes_for(state_dir, sid)
        seen = json.loads(c.text("client_params"))
        assert seen["clientInfo"] == CLIENT_INFO
        assert seen["capabilities"].get("roots") == CLIENT_CAPABILITIES["roots"]
        assert c.delete().status_code == 200
