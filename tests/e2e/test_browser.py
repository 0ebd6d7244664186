"""End to end: real @playwright/mcp workers and a real headless Chromium, through the router."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mcp import Client

from router.client import BrowserSession
from router.layout import StateLayout
from tests.support import ROOT, RawClient, RouterThread, async_wait_for, wait_for
from workers.node import COMPILE_CACHE_ENV, PATH_NODE, node_executable
from workers.orphans import processes_for


async def test_navigate_snapshot_click_and_console(pw_router: RouterThread, pages: str) -> None:
    async with BrowserSession(pw_router.url, token=pw_router.token) as browser:
        page = await browser.navigate(f"{pages}/")
        assert page.title == "Home"
        snapshot = await browser.snapshot()
        assert "Router test page" in snapshot.snapshot

        await browser.click("Click me button", snapshot.ref("Click me"))  # a tool error raises ToolFailed
        after = await browser.snapshot()
        assert "Clicked" in after.snapshot

        console = await browser.console("error")
        assert "clicked-error" in console.messages
        session_id = browser.session_id
    assert session_id and pw_router.manager.sessions.get(session_id) is None  # DELETEd on the way out


def test_ten_concurrent_sessions_are_isolated(pw_router: RouterThread, pages: str) -> None:
    clients = [RawClient(pw_router.url) for _ in range(10)]
    try:
        with ThreadPoolExecutor(max_workers=10) as pool:
            list(pool.map(lambda c: c.initialize(), clients))

            def set_value(item: tuple[int, RawClient]) -> str:
                i, c = item
                return c.text("browser_navigate", url=f"{pages}/set?v=s{i}")

            results = list(pool.map(set_value, enumerate(clients)))
            assert all("### Error" not in r for r in results), results

            def read_back(c: RawClient) -> str:
                return c.text("browser_navigate", url=f"{pages}/get")

            seen = list(pool.map(read_back, clients))
        for i, text in enumerate(seen):
            # Each browser sees only its own cookie and localStorage value.
            assert f"cookie=s{i} storage=s{i}" in text, text
        workers = {pw_router.manager.sessions.get(c.session_id).connection.worker.pid for c in clients}
        assert len(workers) == 10
    finally:
        for c in clients:
            c.delete()
            c.close()


async def test_ended_session_leaves_no_browser(pw_router: RouterThread, pages: str) -> None:
    state = pw_router.settings.state_dir
    async with BrowserSession(pw_router.url, token=pw_router.token) as browser:
        await browser.navigate(f"{pages}/")
        session_id = browser.session_id
        assert session_id and len(processes_for(state, session_id)) > 1  # node and its Chromium
    await async_wait_for(lambda: not processes_for(state, session_id), within=10)


async def test_python_sdk_default_mode_ends_in_a_working_session(pw_router: RouterThread, pages: str) -> None:
    async with Client(f"{pw_router.url}?token={pw_router.token}") as client:
        assert client.session.initialize_result is not None
        result = await client.call_tool("browser_navigate", {"url": f"{pages}/second"})
        text = "".join(getattr(p, "text", "") for p in result.content)
        assert "- Page Title: Second" in text


def test_typescript_sdk_client_works_through_router(pw_router: RouterThread, pages: str) -> None:
    sdk = ROOT / "workers" / "node_modules" / "@modelcontextprotocol" / "sdk" / "dist"
    assert sdk.exists(), "the TypeScript SDK is missing: scripts/setup runs npm ci in workers/"
    script = Path(__file__).with_name("ts_client.mjs")
    out = subprocess.run(
        ["node", str(script), str(sdk), pw_router.url, f"{pages}/second"],
        env={**os.environ, "MCP_ROUTER_TOKEN": pw_router.token},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert "browser_navigate" in answer["tools"]
    assert "- Page Title: Second" in answer["text"]
    assert answer["sessionId"] and pw_router.manager.sessions.get(answer["sessionId"]) is None  # terminated


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def test_workers_run_on_the_pinned_node_with_a_compile_cache_in_the_state_dir(
    pw_router: RouterThread, pages: str
) -> None:
    cache = StateLayout(Path(pw_router.settings.state_dir)).node_compile_cache
    client = RawClient(pw_router.url)
    try:
        client.initialize()
        assert "### Error" not in client.text("browser_navigate", url=f"{pages}/second")
        pid = pw_router.manager.sessions.get(client.session_id).connection.worker.pid
        expected = node_executable()
        if expected == PATH_NODE:  # no pinned build for this machine: the one on PATH
            expected = shutil.which(PATH_NODE) or PATH_NODE
        assert os.readlink(f"/proc/{pid}/exe") == os.path.realpath(expected)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"{COMPILE_CACHE_ENV}={cache}".encode() in environ
        # Its browser is the one the router chose: the headless shell where one is installed.
        browser = pw_router.settings.browser_path()
        assert browser is not None
        exes = {_exe(p) for p in processes_for(Path(pw_router.settings.state_dir), client.session_id)}
        assert os.path.realpath(browser) in exes, exes
    finally:
        client.delete()
        client.close()
    # Node writes the cache as a worker exits (the probe's at router start, this one's now); the
    # next start reads it.
    wait_for(lambda: any(p.is_file() for p in cache.rglob("*")), timeout=30)
