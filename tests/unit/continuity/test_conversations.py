"""A conversation's key and its kept browser state (router/sessions/conversations.py), and the
bridge's header that names it, in-process."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from router.bridge.upstream import RouterLink
from router.errors import BadRequest
from router.http.auth import OPEN_SCOPE, conversation_scope
from router.layout import STATE_FILE, StateLayout
from router.sessions.conversations import MAX_KEY_CHARS, ConversationStore, conversation_id
from router.types import H_CONVERSATION, H_SESSION_ID
from router.upstream.connection import upstream_headers

TOKEN = "t" * 43
KEY = "3f0c6a55-0d0e-4bd4-9b7e-1c2d3e4f5a6b"
DAY = 24 * 3600.0


def test_a_key_is_hashed_within_its_token_scope() -> None:
    scoped = conversation_id(conversation_scope(TOKEN), KEY)
    assert len(scoped) == 64 and KEY not in scoped and TOKEN not in conversation_scope(TOKEN)
    assert scoped == conversation_id(conversation_scope(TOKEN), KEY)  # stable across runs
    assert scoped != conversation_id(conversation_scope("u" * 43), KEY)  # another token: another conversation
    assert scoped != conversation_id(OPEN_SCOPE, KEY)  # no token (--auth none): another again
    assert conversation_scope(None) == OPEN_SCOPE


@pytest.mark.parametrize("key", ["", "a b", "a/b", "../x", "x;y", "é", "-x", "x" * (MAX_KEY_CHARS + 1)])
def test_a_malformed_or_long_key_is_a_400(key: str) -> None:
    with pytest.raises(BadRequest) as caught:
        conversation_id(OPEN_SCOPE, key)
    assert caught.value.status == 400 and "conversation key" in caught.value.message


def test_a_longest_key_is_fine() -> None:
    assert len(conversation_id(OPEN_SCOPE, "k" * MAX_KEY_CHARS)) == 64


def saved(session_dir: Path, clicks: int) -> Path:
    session_dir.mkdir(parents=True, exist_ok=True)
    path = session_dir / STATE_FILE
    path.write_text(json.dumps({"storage": {"cookies": [{"name": "clicks", "value": str(clicks)}]}, "saved": 1.0}))
    return path


def held_clicks(path: Path) -> str:
    return str(json.loads(path.read_text())["storage"]["cookies"][0]["value"])


def test_the_newest_session_of_a_conversation_owns_its_state(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    store = ConversationStore(layout, DAY)
    cid = conversation_id(OPEN_SCOPE, KEY)
    assert store.keep(cid, "old", 100.0, saved(tmp_path / "old", 1))
    assert store.keep(cid, "new", 200.0, saved(tmp_path / "new", 2))  # a newer session takes over
    assert not store.keep(cid, "old", 100.0, saved(tmp_path / "old", 3))  # an older fork does not
    assert store.keep(cid, "new", 200.0, saved(tmp_path / "new", 4))  # its owner still does
    assert held_clicks(layout.conversation_file(cid)) == "4"
    fresh = tmp_path / "sessions" / "next"
    assert store.hand_to(cid, fresh, STATE_FILE)
    assert held_clicks(fresh / STATE_FILE) == "4"
    assert not store.hand_to(conversation_id(OPEN_SCOPE, "unknown"), tmp_path / "sessions" / "x", STATE_FILE)


def test_a_conversation_past_the_retention_is_not_handed_on_and_is_pruned(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    store = ConversationStore(layout, DAY)
    old, recent = conversation_id(OPEN_SCOPE, "old"), conversation_id(OPEN_SCOPE, "recent")
    store.keep(old, "s1", 1.0, saved(tmp_path / "s1", 1))
    store.keep(recent, "s2", 2.0, saved(tmp_path / "s2", 2))
    past = time.time() - DAY - 60
    os.utime(layout.conversation_file(old), (past, past))
    assert not store.hand_to(old, tmp_path / "sessions" / "n", STATE_FILE)
    assert store.prune() == 1
    assert [p.name for p in layout.conversations_dir.iterdir()] == [f"{recent}.json"]


def test_a_state_that_cannot_be_read_is_not_kept(tmp_path: Path) -> None:
    store = ConversationStore(StateLayout(tmp_path), DAY)
    assert not store.keep(conversation_id(OPEN_SCOPE, KEY), "s", 1.0, tmp_path / "missing.json")
    assert store.prune() == 0  # no directory yet: nothing to prune, nothing raised


async def test_the_bridge_names_the_conversation_on_initialize_only() -> None:
    seen: list[tuple[str | None, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get(H_CONVERSATION), json.loads(request.content)["method"]))
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": {}}, headers={H_SESSION_ID: "s1"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        link = RouterLink(client, "http://router/mcp", None, conversation=KEY)
        for method in ("initialize", "tools/list", "initialize"):
            [_ async for _ in link.post({"jsonrpc": "2.0", "id": 1, "method": method})]
        unnamed = RouterLink(client, "http://router/mcp", None)
        [_ async for _ in unnamed.post({"jsonrpc": "2.0", "id": 1, "method": "initialize"})]
    assert seen == [(KEY, "initialize"), (None, "tools/list"), (None, "initialize"), (None, "initialize")]


def test_the_header_never_goes_to_a_worker() -> None:
    headers = upstream_headers(
        [(b"content-type", b"application/json"), (H_CONVERSATION.encode(), KEY.encode())],
        host="127.0.0.1:20001", worker_session_id=None,
    )  # fmt: skip
    assert H_CONVERSATION.encode() not in dict(headers)
