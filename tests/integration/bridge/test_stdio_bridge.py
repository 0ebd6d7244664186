"""`mcp-router stdio` against the stand-in worker: forwarding both ways, concurrency, the end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
from mcp import Client

from router.errors import PARSE_ERROR
from router.sessions.table import State
from tests.support import (
    FAKE_WORKER_COMMAND,
    ROOT,
    TEST_TOKEN,
    RouterThread,
    auth_headers,
    initialize_body,
    seed_token,
    spare_port,
    text_of,
    wait_for,
)
from tests.support.stdio import SESSION_LINE, bridge_params, bridged_session, bridged_session_id
from workers.orphans import processes_for

ROOT_URI = "file:///work/project"
SLOW_SECONDS = 5.0
STARTED_LINE = re.compile(r"started `mcp-router serve` \(pid (\d+)\)")


async def _roots(_context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name="project")])


async def test_roots_cross_and_stdin_close_deletes(fake_router: RouterThread, tmp_path: Path) -> None:
    errlog = tmp_path / "bridge.err"
    with errlog.open("w") as err:
        async with bridged_session(fake_router.url, err, list_roots=_roots) as session:
            listed = await session.list_tools()
            assert "roots" in {tool.name for tool in listed.tools}
            # The worker asks roots/list; the question crosses the router and the bridge to us.
            result = await session.call_tool("roots", {})
            assert text_of_result(result) == ROOT_URI
            await session.send_ping()
            session_id = bridged_session_id(errlog)
            assert fake_router.manager.sessions.get(session_id).state is State.LIVE
    # Closing stdin made the bridge DELETE its session: the router says it is gone.
    session = fake_router.manager.sessions.get(session_id)
    assert session is None or session.state is State.CLOSED
    async with httpx.AsyncClient(trust_env=False) as client:
        answer = await client.post(
            fake_router.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers=auth_headers() | {"mcp-session-id": session_id, "accept": "application/json, text/event-stream"},
        )
    assert answer.status_code == 404


async def test_a_slow_call_does_not_hold_up_others(fake_router: RouterThread, tmp_path: Path) -> None:
    with (tmp_path / "bridge.err").open("w") as err:
        async with bridged_session(fake_router.url, err) as session:
            finished: list[str] = []

            async def slow() -> None:
                await session.call_tool("slow", {"seconds": SLOW_SECONDS})
                finished.append("slow")

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(slow)
                # Blocked behind the slow call, the echo would finish after it.
                echoed = await session.call_tool("echo", {"text": "quick"})
                finished.append("echo")
            assert text_of_result(echoed) == "quick"
            assert finished == ["echo", "slow"]


def test_no_router_says_how_to_start_one() -> None:
    url = f"http://127.0.0.1:{spare_port()}/mcp"
    done = subprocess.run(
        [sys.executable, "-m", "router.cli", "stdio", "--url", url],
        cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode != 0
    assert done.stdout == ""  # stdout is the MCP wire: nothing but messages may go there
    assert f"no mcp-router answers at {url}" in done.stderr
    assert "mcp-router serve" in done.stderr and "--start" in done.stderr


def text_of_result(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return text_of({"result": result.model_dump(by_alias=True, mode="json")})


def test_a_signal_ends_the_session_and_a_bad_line_gets_a_parse_error(fake_router: RouterThread) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "router.cli", "stdio", "--url", fake_router.url],
        cwd=ROOT, env=dict(os.environ, MCP_ROUTER_TOKEN=TEST_TOKEN),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as bridge:
        assert bridge.stdin is not None and bridge.stdout is not None and bridge.stderr is not None
        try:
            bridge.stdin.write(json.dumps(initialize_body()).encode() + b"\n")
            bridge.stdin.flush()
            assert json.loads(bridge.stdout.readline())["id"] == 1
            bridge.stdin.write(b"not json\n")
            bridge.stdin.flush()
            refused = json.loads(bridge.stdout.readline())
            assert refused["id"] is None and refused["error"]["code"] == PARSE_ERROR
            # stdin stays open: SIGTERM (a client killing its server) must still end the session.
            bridge.send_signal(signal.SIGTERM)
            assert bridge.wait(timeout=30) == 0
        finally:
            if bridge.poll() is None:
                bridge.kill()
                bridge.wait()
        logged = bridge.stderr.read().decode()
    session_id = SESSION_LINE.search(logged)
    assert session_id, f"the bridge logged no session:\n{logged}"
    assert fake_router.manager.sessions.get(session_id.group(1)) is None  # DELETEd, not left live


async def test_start_starts_a_router_and_waits_for_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    seed_token(state)
    port = spare_port()
    url = f"http://127.0.0.1:{port}/mcp"
    errlog = tmp_path / "bridge.err"
    # The started router inherits the bridge's environment: the stand-in worker, and the
    # non-browser conftest sets outside e2e.
    worker = {"MCP_ROUTER_WORKER_COMMAND": json.dumps(FAKE_WORKER_COMMAND),
              "MCP_ROUTER_BROWSER": os.environ["MCP_ROUTER_BROWSER"]}
    try:
        with errlog.open("w") as err:
            async with bridged_session(url, err, extra=("--start", "--state-dir", str(state)), env=worker) as session:
                echoed = await session.call_tool("echo", {"text": "started"})
                assert text_of_result(echoed) == "started"
    finally:
        started = STARTED_LINE.search(errlog.read_text())
        assert started, f"the bridge started no router:\n{errlog.read_text()}"
        pid = int(started.group(1))
        os.kill(pid, signal.SIGTERM)
        # Not our child (it outlives the bridge on purpose): gone, or a zombie nobody reaps here.
        wait_for(lambda: not _running(pid), timeout=30)
        wait_for(lambda: not processes_for(state), timeout=30)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_an_auto_mode_client_falls_back_to_initialize(fake_router: RouterThread) -> None:
    # mcp 2.x's Client first sends server/discover (2026-07-28); the router's JSON-RPC refusal,
    # carried over stdio with its code, must make it fall back to the initialize handshake.
    async with Client(bridge_params(fake_router.url)) as client:
        assert text_of_result(await client.call_tool("echo", {"text": "auto"})) == "auto"
