"""Real @playwright/mcp workers: only the router can talk to them, their browsers cannot reach the
router, the browse policy applies, and a worker (even SIGKILLed) leaves nothing outside the state dir."""

from __future__ import annotations

import os
import signal
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.integration.router.expect_client import post_expecting_continue
from tests.support import TEST_TOKEN, RawClient, RouterThread, initialize_body, playwright_router, wait_for
from tests.support.client import ref_of, text_of
from tests.support.wait import wait_recorded
from workers.supervisor import Worker

BLOCKED = "ERR_BLOCKED_BY_CLIENT"
CALL_TIMEOUT = 60.0


def worker_of(router: RouterThread, session_id: str) -> Worker:
    worker: Worker = router.manager.sessions.get(session_id).connection.worker
    return worker


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def real_descriptors() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ms-playwright" / "b"


def ours(directory: Path, state: Path) -> list[Path]:
    """Browser descriptors in ``directory`` written for a browser of this state dir."""
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if str(state) in p.read_text(errors="replace")]


def test_a_worker_answers_the_router_only(pw_router: RouterThread, pages: str) -> None:
    with RawClient(pw_router.url) as c:
        c.initialize()
        assert "Home" in c.text("browser_navigate", url=f"{pages}/")
        assert c.session_id is not None
        worker = worker_of(pw_router, c.session_id)
        assert worker.host_header.startswith("w-")
        assert environ(worker.pid)["PLAYWRIGHT_MCP_ALLOWED_HOSTS"] == worker.host_header
        assert worker.host_header not in Path(f"/proc/{worker.pid}/cmdline").read_text()
        for host in (f"localhost:{worker.port}", f"127.0.0.1:{worker.port}", f"{worker.host_header}:{worker.port}"):
            direct = httpx.post(
                worker.url,
                json=initialize_body(),
                headers={"host": host, "accept": "application/json, text/event-stream"},
                trust_env=False,
                timeout=10,
            )
            assert direct.status_code == 403, (host, direct.status_code)
        assert "Home" in c.text("browser_snapshot")  # through the router all is well
        c.delete()


def test_a_page_cannot_reach_the_router(pw_router: RouterThread) -> None:
    with RawClient(pw_router.url) as c:
        c.initialize()
        for url in (
            f"http://127.0.0.1:{pw_router.port}/api/sessions",
            f"http://localhost:{pw_router.port}/api/sessions?token={TEST_TOKEN}",
            f"http://[::1]:{pw_router.port}/healthz",
        ):
            text = c.text("browser_navigate", url=url)
            assert BLOCKED in text, text
            assert c.session_id not in c.text("browser_snapshot")
        c.delete()


def test_an_expect_continue_call_reaches_the_worker_as_a_plain_post(pw_router: RouterThread, pages: str) -> None:
    """Node answers ``Expect: 100-continue`` with an interim head of its own: forwarded, it was
    taken for the answer, the call's answer was lost and the session's next calls at once hung."""
    with RawClient(pw_router.url) as c, RawClient(pw_router.url) as other:
        c.initialize()
        assert "Home" in c.text("browser_navigate", url=f"{pages}/")
        assert c.session_id is not None
        call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "browser_evaluate", "arguments": {"function": "() => 'x'.repeat(2000)"}}}
        answer = post_expecting_continue(pw_router.url, c.session_id, call)
        assert answer.interim == [100] and answer.status == 200
        [message] = [m for m in answer.messages if m.get("id") == 9]
        assert "x" * 2000 in text_of(message)
        other.session_id = c.session_id
        with ThreadPoolExecutor(2) as pool:
            snapshot = pool.submit(c.text, "browser_snapshot")
            tabs = pool.submit(other.text, "browser_tabs", action="list")
            assert "Home" in snapshot.result(timeout=CALL_TIMEOUT)
            assert "Home" in tabs.result(timeout=CALL_TIMEOUT)
        c.delete()
    state = Path(pw_router.settings.state_dir)
    wait_recorded(pw_router)
    with sqlite3.connect(state / "router.db") as db:
        row = db.execute("SELECT status, duration_ms FROM responses WHERE ref_id = ?", (ref_of(message),)).fetchone()
    assert row is not None and row[0] == "success" and row[1] is not None


def test_browse_allow_keeps_the_browser_on_the_listed_origins(tmp_path: Path, chromium: str, pages: str) -> None:
    other = pages.replace("127.0.0.1", "localhost")  # the same server under another origin
    assert urlsplit(other).netloc != urlsplit(pages).netloc
    with playwright_router(tmp_path, chromium, browse_allow=[pages]) as router, RawClient(router.url) as c:
        c.initialize()
        assert "Home" in c.text("browser_navigate", url=f"{pages}/")
        assert BLOCKED in c.text("browser_navigate", url=f"{other}/")
        c.delete()


def test_a_worker_leaves_nothing_outside_the_state_dir(tmp_path: Path, chromium: str, pages: str) -> None:
    state = tmp_path / "state"
    real = real_descriptors()
    with playwright_router(state, chromium) as router, RawClient(router.url) as c:
        c.initialize()
        assert "Home" in c.text("browser_navigate", url=f"{pages}/")  # the browser is launched
        assert c.session_id is not None
        worker = worker_of(router, c.session_id)
        env = environ(worker.pid)
        session_dir = state / "sessions" / c.session_id
        assert env["XDG_CACHE_HOME"] == str(session_dir / "cache")
        assert ours(session_dir / "cache" / "ms-playwright" / "b", state)  # Playwright's descriptor, here
        temp = Path(env["TMPDIR"])
        assert any(temp.iterdir())  # the browser's sockets and singleton dir
        # SIGKILL: nobody closes anything cleanly.
        os.killpg(worker.pgid, signal.SIGKILL)
        wait_for(lambda: not worker.alive() and not temp.exists(), timeout=15)
        root = temp.parent
    assert not ours(real, state)
    assert not root.exists()

