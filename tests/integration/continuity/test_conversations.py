"""A conversation's browser across its MCP sessions (router/sessions/conversations.py), with the
stand-in worker: a new session that names a conversation on ``initialize`` gets the browser its
last session left (the stand-in's ``clicks`` cookie and page), at its first browser call, with the
resume notice saying why. Keys are hashed and scoped to the token; a fork gets a copy."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.client import BrowserSession
from router.http.auth import conversation_scope
from router.sessions.conversations import conversation_id
from router.types import H_CONVERSATION
from tests.support import STANDIN_WORKER_COMMAND, TEST_TOKEN, RawClient, RouterThread, router_settings, wait_for
from tests.support.client import initialize_body
from tests.support.routers import ROOT

KEY = "3f0c6a55-0d0e-4bd4-9b7e-1c2d3e4f5a6b"  # shaped like Claude Code's CLAUDE_CODE_SESSION_ID
PAGE = "http://127.0.0.1:9/conversation-page"


def settings(state: Path, **overrides: object) -> object:
    return router_settings(state, worker_command=STANDIN_WORKER_COMMAND, record=True, **overrides)


@pytest.fixture
def router(tmp_path: Path) -> Iterator[RouterThread]:
    with RouterThread(settings(tmp_path)) as r:  # type: ignore[arg-type]
        yield r


def open_session(router: RouterThread, key: str | None, token: str = TEST_TOKEN) -> RawClient:
    client = RawClient(router.url, token=token)
    extra = {} if key is None else {H_CONVERSATION: key}
    response = client.post(initialize_body(), **extra)
    assert response.status_code == 200, response.text
    client.session_id = response.headers["mcp-session-id"]
    assert client.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    return client


def clicks(snapshot_text: str) -> int:
    return int(snapshot_text.split("clicks ", 1)[1].split("\n", 1)[0])


def browse_and_leave(router: RouterThread, key: str | None, times: int) -> str:
    """One process of the client: navigates, clicks ``times`` times, ends with DELETE (the
    bridge's end at EOF). Returns its session id."""
    with open_session(router, key) as c:
        c.text("browser_navigate", url=PAGE)
        for _ in range(times):
            c.text("browser_click", target="e2", element="Bump")
        assert c.delete().status_code == 200
        assert c.session_id is not None
        return c.session_id


def test_a_new_session_of_the_conversation_gets_its_browser_back(router: RouterThread) -> None:
    first = browse_and_leave(router, KEY, times=3)
    with open_session(router, KEY) as c:
        answer = c.text("browser_snapshot")
        assert clicks(answer) == 3  # the cookie came back
        assert f"- Page URL: {PAGE}" in answer  # and the page
        assert "restored after the conversation resumed" in answer
        c.text("browser_click", target="e2", element="Bump")
        second = c.session_id
        assert c.delete().status_code == 200
    with open_session(router, KEY) as c:  # and again: the newest session's state
        assert clicks(c.text("browser_snapshot")) == 4
        c.delete()
    # The record links the conversation's sessions, under its hashed key only.
    db = sqlite3.connect(Path(router.settings.state_dir) / "router.db")
    cid = conversation_id(conversation_scope(TEST_TOKEN), KEY)

    def linked() -> list[tuple[str, str]]:
        rows = db.execute("SELECT id, conversation FROM sessions ORDER BY created").fetchall()
        return [r for r in rows if r[0] in (first, second)]

    wait_for(lambda: linked() == [(first, cid), (second, cid)], timeout=10)
    assert all(KEY not in str(r) for r in db.execute("SELECT * FROM sessions").fetchall())
    detail = db.execute(
        "SELECT detail FROM session_events WHERE session_id = ? AND kind = 'resumed'", (second,)
    ).fetchall()
    assert detail == [("conversation",)]
    files = list((Path(router.settings.state_dir) / "conversations").iterdir())
    assert [f.name for f in files] == [f"{cid}.json"]
    assert KEY not in files[0].read_text()


def test_another_key_or_no_key_starts_fresh(router: RouterThread) -> None:
    browse_and_leave(router, KEY, times=2)
    for key in ("another-conversation", None):
        with open_session(router, key) as c:
            answer = c.text("browser_snapshot")
            assert clicks(answer) == 0 and PAGE not in answer and "restored" not in answer
            c.delete()


def test_the_same_key_under_another_token_starts_fresh(tmp_path: Path) -> None:
    with RouterThread(settings(tmp_path)) as r:  # type: ignore[arg-type]
        browse_and_leave(r, KEY, times=2)
    other = "another-token-" + "fedcba9876543210" * 3
    (tmp_path / "token").write_text(other + "\n")
    with RouterThread(settings(tmp_path)) as r:  # type: ignore[arg-type]
        with open_session(r, KEY, token=other) as c:
            assert clicks(c.text("browser_snapshot")) == 0
            c.delete()
        # The old token no longer opens anything at all.
        with RawClient(r.url, token=TEST_TOKEN) as stale:
            assert stale.post(initialize_body(), **{H_CONVERSATION: KEY}).status_code == 401


def test_a_fork_gets_a_copy_never_the_live_browser(router: RouterThread) -> None:
    browse_and_leave(router, KEY, times=2)
    with open_session(router, KEY) as a, open_session(router, KEY) as b:
        assert clicks(a.text("browser_snapshot")) == 2
        assert clicks(b.text("browser_snapshot")) == 2
        a.text("browser_click", target="e2", element="Bump")
        assert clicks(b.text("browser_snapshot")) == 2  # a's click is not in b's browser
        sessions = [router.manager.sessions.get(s.session_id) for s in (a, b)]
        assert sessions[0].connection.worker.pid != sessions[1].connection.worker.pid
        b.text("browser_click", target="e2", element="Bump")
        b.text("browser_click", target="e2", element="Bump")
        # The older fork leaves after the newer one: it must not overwrite the newer's state.
        assert b.delete().status_code == 200
        assert a.delete().status_code == 200
    with open_session(router, KEY) as c:
        assert clicks(c.text("browser_snapshot")) == 4  # b's: the conversation's newest session
        c.delete()


def test_a_reaped_session_of_the_conversation_hands_on_its_state(tmp_path: Path) -> None:
    """Claude Code never sends DELETE over HTTP and pauses past the idle timeout: the reap's save
    is the conversation's state too."""
    with RouterThread(settings(tmp_path, idle_timeout=0.5)) as r:  # type: ignore[arg-type]
        with open_session(r, KEY) as c:
            c.text("browser_click", target="e2", element="Bump")
            session = r.manager.sessions.get(c.session_id)
            wait_for(lambda: session.connection is None, timeout=20)
        with open_session(r, KEY) as c:
            assert clicks(c.text("browser_snapshot")) == 1


@pytest.mark.parametrize(
    "key",
    ["", "semi;colon", "a b", "comma,list", "ключ", "x" * 129, "../../etc/passwd", "a\\b", '"quoted"', "-leading-dash"],
)
def test_a_malformed_or_too_long_key_gets_400_and_no_session(router: RouterThread, key: str) -> None:
    client = RawClient(router.url)
    headers: dict[str, str | bytes] = {**client.headers(), H_CONVERSATION: key.encode("utf-8")}
    response = client.http.post(router.url, content=json.dumps(initialize_body()).encode(), headers=headers)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"]["code"] == -32600 and "conversation key" in body["error"]["message"]
    assert "mcp-session-id" not in response.headers
    assert len(router.manager.sessions) == 0
    client.close()



def test_the_record_shows_a_conversations_sessions(router: RouterThread) -> None:
    first = browse_and_leave(router, KEY, times=1)
    second = browse_and_leave(router, KEY, times=1)
    browse_and_leave(router, "another", times=1)
    cid = conversation_id(conversation_scope(TEST_TOKEN), KEY)
    with RawClient(router.url) as c:
        rows = c.http.get(f"{router.base_url}/api/sessions").json()["sessions"]
    assert {r["id"]: r["conversation"] for r in rows if r["id"] in (first, second)} == {first: cid, second: cid}
    state = router.settings.state_dir
    shown = subprocess.run(
        [sys.executable, "-m", "router.cli", "show", "--conversation", KEY, "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    headers = [line.split()[1] for line in shown.stdout.splitlines() if line.startswith("session ")]
    assert headers == [first, second]  # oldest first, the other conversation not among them
    assert "conversation" in shown.stdout  # the second's resume, and why
    for bad, code in (("no-such-conversation", 1), ("bad key", 2)):
        refused = subprocess.run(
            [sys.executable, "-m", "router.cli", "show", "--conversation", bad, "--state-dir", str(state)],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip
        assert refused.returncode == code and refused.stderr, refused


async def test_the_python_client_names_its_conversation(router: RouterThread) -> None:
    """`BrowserSession(conversation=...)`: the header on initialize, its DELETE on exit the save."""
    async with BrowserSession(router.url, token=TEST_TOKEN, conversation=KEY) as first:
        await first.navigate(PAGE)
        await first.click("Bump", (await first.snapshot()).ref("Bump"))
    async with BrowserSession(router.url, token=TEST_TOKEN, conversation=KEY) as again:
        snapshot = await again.snapshot()
        assert "clicks 1" in snapshot.snapshot and snapshot.url == PAGE
    async with BrowserSession(router.url, token=TEST_TOKEN) as unnamed:
        assert "clicks 0" in (await unnamed.snapshot()).snapshot
