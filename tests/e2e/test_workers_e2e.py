"""The real @playwright/mcp worker and Chromium, through the default template."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx

from tests.support import async_wait_for, messages_of
from workers import orphans
from workers.spec import WorkerSpec, default_cli_path
from workers.supervisor import Supervisor, Worker

COMM_MAX = 15  # the kernel keeps this much of a process's name in /proc/<pid>/comm


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _rpc_result(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    message = messages_of(resp)[-1]
    assert "result" in message, message
    result: dict[str, Any] = message["result"]
    return result


def _pgid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


async def _navigate(worker: Worker, url: str) -> str:
    headers = {
        "Host": worker.host_header,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with httpx.AsyncClient(timeout=30) as client:
        init = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "workers-e2e", "version": "0"}},
        }  # fmt: skip
        resp = await client.post(worker.url, headers=headers, json=init)
        assert _rpc_result(resp)["serverInfo"]["name"] == "Playwright"
        headers["Mcp-Session-Id"] = resp.headers["mcp-session-id"]
        headers["MCP-Protocol-Version"] = "2025-06-18"
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await client.post(worker.url, headers=headers, json=note)).status_code == 202
        call = {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "browser_navigate", "arguments": {"url": url}},
        }  # fmt: skip
        text: str = _rpc_result(await client.post(worker.url, headers=headers, json=call))["content"][0][
            "text"
        ]
        return text


async def test_real_worker_navigates_and_leaves_nothing(state_dir: Path, pages: str, chromium: str) -> None:
    page_url = f"{pages}/workers"
    sup = Supervisor(spec=WorkerSpec(), state_dir=state_dir, browser=chromium, cli=str(default_cli_path()))
    sid = "e2e-" + uuid.uuid4().hex
    exits: list[tuple[int, bool]] = []
    sup.add_exit_listener(lambda w, rc: exits.append((rc, w.stopping)))
    async with sup.run():
        worker = await sup.spawn(sid)
        text = await _navigate(worker, page_url)
        assert "workers e2e" in text  # the page title
        assert str(worker.output_dir) in text  # --file-paths absolute, under our output dir

        tree = orphans.processes_for(state_dir, sid)
        comms = {_comm(pid) for pid in tree}
        browser = Path(chromium).name[:COMM_MAX]  # the headless shell, or a full Chromium
        assert {"node", browser} <= comms, comms
        # Chromium runs in a session of its own, apart from node's group: a group kill alone
        # would miss it; processes_for finds it by marker, group and profile flag.
        chromium_groups = {_pgid(p) for p in tree if _comm(p) == browser}
        assert worker.pgid not in chromium_groups

        with anyio.fail_after(10):
            await sup.stop(sid)
        assert exits == [(worker.returncode, True)]
        await async_wait_for(lambda: orphans.processes_for(state_dir) == [], within=10)

        # A crash (kill -9 of node alone): detected at once, and Chromium does not outlive it.
        crashed = await sup.spawn(sid)
        assert "workers e2e" in await _navigate(crashed, page_url)
        os.kill(crashed.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            assert await crashed.wait_exited() == -signal.SIGKILL
        assert exits[-1] == (-signal.SIGKILL, False)
        await async_wait_for(lambda: orphans.processes_for(state_dir) == [], within=10)
