"""A real flow through the real @playwright/mcp worker (navigate, click, console error), recorded
and read back. Spawned by the workers supervisor, so the files live where the router's will."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from router.record.recorder import Recorder
from router.record.snapshots import compact_summary, summarize
from tests.support import messages_of
from workers import orphans
from workers.spec import WorkerSpec, default_cli_path
from workers.supervisor import Supervisor, Worker


class _Client:
    """Speaks to the worker directly and records like the proxy does."""

    def __init__(self, http: httpx.AsyncClient, worker: Worker, rec: Recorder) -> None:
        self.http, self.worker, self.rec, self.n = http, worker, rec, 0
        self.headers = {"Host": worker.host_header, "Accept": "application/json, text/event-stream"}

    async def call(self, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.n += 1
        ref = f"ref-{self.n}"
        tool = params.get("name") if method == "tools/call" else None
        self.rec.request(ref, "s1", method, tool, params)
        started = time.perf_counter()
        resp = await self.http.post(self.worker.url, headers=self.headers,
                                    json={"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        if "mcp-session-id" in resp.headers:
            self.headers["Mcp-Session-Id"] = resp.headers["mcp-session-id"]
        result = messages_of(resp)[-1]["result"]
        self.rec.response(ref, status="error" if result.get("isError") else "success",
                          result=json.dumps(result), duration_ms=(time.perf_counter() - started) * 1000,
                          output_dir=self.worker.output_dir)
        return ref, result


async def test_real_flow_fills_every_table(state_dir: Path, pages: str, chromium: str) -> None:
    state, page_url = state_dir, f"{pages}/recorder"
    sup = Supervisor(spec=WorkerSpec(), state_dir=state, browser=chromium, cli=str(default_cli_path()))
    rec = Recorder(state / "router.db")
    async with rec.run(), sup.run(), httpx.AsyncClient(timeout=60) as http:
        worker = await sup.spawn("s1")
        rec.session_opened("s1", client_info={"name": "e2e"}, protocol_version="2025-06-18",
                           port=worker.port, pid=worker.pid)
        client = _Client(http, worker, rec)
        await client.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "e2e", "version": "0"}})
        await http.post(worker.url, headers=client.headers,
                        json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        nav, nav_result = await client.call(
            "tools/call", {"name": "browser_navigate", "arguments": {"url": page_url}})
        snap_ref, snap = await client.call("tools/call", {"name": "browser_snapshot", "arguments": {}})
        button = next(line for line in summarize(snap).page_snapshot.split("\n")  # type: ignore[union-attr]
                      if 'button "Press"' in line).split("[ref=")[1].rstrip("]")
        click, _ = await client.call("tools/call", {"name": "browser_click",
                                                    "arguments": {"element": "Press", "target": button}})
        console, _ = await client.call("tools/call", {"name": "browser_console_messages",
                                                      "arguments": {"level": "debug"}})
        records = rec.records
        assert records is not None
        page = await records.read_content("s1", nav)
        assert 'heading "Hello"' in page and "Not clicked" in page
        diff = await records.read_content("s1", click, since_ref=nav)
        assert "+  - paragraph" in diff and "Clicked" in diff
        assert await records.read_content("s1", nav) == ""
        assert "[error] boom from page" in await records.read_console("s1", nav, "error")
        assert "[warn] clicked warn" in await records.read_console("s1", click, "warn")
        assert "[error] boom from page" in await records.read_console("s1", console)
        summary = compact_summary(nav, "browser_navigate", summarize(nav_result))
        assert "snapshot available: yes" in summary and "\nconsole: " in summary
        calls = await records.session_calls("s1")
        assert [c["tool"] for c in calls] == [None, "browser_navigate", "browser_snapshot",
                                              "browser_click", "browser_console_messages"]
        assert all(c["status"] == "success" for c in calls) and snap_ref
        rec.session_state("s1", "closed")
        await sup.stop("s1")
        sessions = await records.list_sessions()
    assert sessions[0]["state"] == "closed" and sessions[0]["calls"] == 4
    assert not orphans.processes_for(state)
