"""A tool answer in the SDKs' compact form leaves unparsed (``Exchange._take_unread``): its id
compared and its refId spliced in from its bytes, its row made of them, its text read once it has
left. Each answer shape below is served both ways, unparsed and parsed (that path turned off):
the client and the record must not tell them apart. The worker is scripted, so the shapes are
exactly the bytes a worker could write; the e2e suite's every call takes the same path through
Playwright's own answers."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from router.http.exchange import Exchange
from router.http.upstream_pool import UpstreamPool
from tests.support import (
    REF_KEY,
    RawClient,
    RouterThread,
    messages_of,
    ref_of,
    wait_for,
    wait_recorded,
)
from tests.support.scripted_worker import ScriptedWorker, http_answer

PAGE_URL: Final = "http://127.0.0.1:9/unparsed"
TEXT: Final = f"### Page\n- Page URL: {PAGE_URL}\n- Page Title: Unparsed"

# The result of each shape; the worker writes it as {"result":…,"jsonrpc":"2.0","id":…}.
SHAPES: Final[dict[str, dict[str, Any]]] = {
    "plain": {"content": [{"type": "text", "text": TEXT}]},
    "a tool error": {"content": [{"type": "text", "text": "### Error\nno such ref"}], "isError": True},
    "isError false": {"content": [{"type": "text", "text": TEXT}], "isError": False},
    "an error member inside": {"content": [{"type": "text", "text": TEXT}], "structuredContent": {"error": "x"}},
    "a quote before error in the text": {"content": [{"type": "text", "text": 'say "error'}]},
    "escapes and non-ASCII": {"content": [{"type": "text", "text": 'L’élève « déjà vu » \\ "q"\n' + TEXT}]},
    "an empty result": {},
}
# The shapes taken unparsed; the others hold "isError" or "error" in their result's bytes.
UNPARSED: Final = frozenset({"plain", "escapes and non-ASCII", "an empty result"})


@pytest.fixture(scope="module")
def router(rec_router: RouterThread) -> RouterThread:
    return rec_router


def compact_answer(request_id: Any, result: dict[str, Any]) -> bytes:
    payload = {"result": result, "jsonrpc": "2.0", "id": request_id}
    event = b"event: message\ndata: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    return http_answer(200, event + b"\n\n", {"content-type": "text/event-stream"})


def call_body(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}


def row_of(router: RouterThread, ref: str) -> tuple[str, str]:
    wait_recorded(router.settings.state_dir)
    with sqlite3.connect(Path(router.settings.state_dir) / "router.db") as db:
        row = db.execute("SELECT status, result FROM responses WHERE ref_id = ?", (ref,)).fetchone()
    assert row is not None, ref
    return row[0], row[1]


def without_ref(answer: dict[str, Any]) -> dict[str, Any]:
    meta = answer["result"]["_meta"]
    assert set(meta) == {REF_KEY}
    return {**answer, "result": {k: v for k, v in answer["result"].items() if k != "_meta"}}


@pytest.fixture(scope="module")
def scripted(router: RouterThread) -> Iterator[tuple[RawClient, ScriptedWorker]]:
    """A session whose worker connection leads to a scripted worker."""
    with RawClient(router.url) as client, ScriptedWorker(compact_answer(0, {})) as worker:
        client.initialize()
        client.start_worker()
        session = router.manager.sessions.get(client.session_id)
        assert session.connection is not None
        session.connection.upstream = UpstreamPool("127.0.0.1", worker.port, "/mcp")
        worker.answers.append(compact_answer(1, {"content": []}))
        client.post(call_body(1))  # the steady lane takes idle connections only: this opens one
        yield client, worker
        client.delete()


def served(
    router: RouterThread, scripted: tuple[RawClient, ScriptedWorker], request_id: Any, result: dict[str, Any]
) -> tuple[dict[str, Any], tuple[str, str]]:
    """The client's answer (refId taken off) and the row of a call the worker answers with ``result``."""
    client, worker = scripted
    worker.answers.append(compact_answer(request_id, result))
    r = client.post(call_body(request_id))
    assert r.status_code == 200
    (answer,) = messages_of(r)
    return without_ref(answer), row_of(router, ref_of(answer))


def spy_on_unread(monkeypatch: pytest.MonkeyPatch) -> list[bytes | None]:
    """What each ``_take_unread`` returns from now on, in order."""
    taken: list[bytes | None] = []
    take_unread = Exchange._take_unread

    def spy(exchange: Exchange, payload: bytes) -> bytes | None:
        taken.append(take_unread(exchange, payload))
        return taken[-1]

    monkeypatch.setattr(Exchange, "_take_unread", spy)
    return taken


@pytest.mark.parametrize("request_id", [41, "s-41"], ids=["number id", "string id"])
@pytest.mark.parametrize("shape", SHAPES)
def test_an_answer_taken_unparsed_is_the_answer_and_the_row_a_parsed_one_gives(
    router: RouterThread,
    scripted: tuple[RawClient, ScriptedWorker],
    monkeypatch: pytest.MonkeyPatch,
    shape: str,
    request_id: Any,
) -> None:
    result = SHAPES[shape]
    taken = spy_on_unread(monkeypatch)
    unparsed = served(router, scripted, request_id, result)
    assert len(taken) == 1 and (taken[0] is not None) == (shape in UNPARSED)
    monkeypatch.setattr(Exchange, "_take_unread", lambda self, payload: None)
    parsed = served(router, scripted, request_id, result)

    assert unparsed == parsed
    assert unparsed[0] == {"result": result, "jsonrpc": "2.0", "id": request_id}
    status, kept = unparsed[1]
    assert status == ("error" if result.get("isError") else "success")
    assert json.loads(kept) == result


def test_an_unparsed_answer_is_read_once_it_has_left(
    router: RouterThread, scripted: tuple[RawClient, ScriptedWorker]
) -> None:
    # What continuity and the catalog learn from an answer's text (here its page URL) comes from
    # the read after the answer left.
    session = router.manager.sessions.get(scripted[0].session_id)
    session.current_url = None
    served(router, scripted, 2, SHAPES["plain"])
    wait_for(lambda: session.current_url == PAGE_URL)


@pytest.mark.parametrize(
    "tail",
    [b'"id":041}', b'"id":"\\x"}', b'"id":42}'],
    ids=["a number JSON refuses", "a string JSON refuses", "another request's id"],
)
def test_an_answer_whose_id_is_not_the_calls_is_not_taken_unparsed(
    router: RouterThread, scripted: tuple[RawClient, ScriptedWorker], monkeypatch: pytest.MonkeyPatch, tail: bytes
) -> None:
    # Not taken here, it is the parsed path's (which hands it to the chain): no 500, and the
    # session goes on.
    taken = spy_on_unread(monkeypatch)
    body = b'event: message\ndata: {"result":{"content":[]},"jsonrpc":"2.0",' + tail + b"\n\n"
    client, worker = scripted
    worker.answers.append(http_answer(200, body, {"content-type": "text/event-stream"}))
    assert client.post(call_body(41)).status_code == 200
    assert taken and not any(taken)
    again = served(router, scripted, 43, SHAPES["plain"])
    assert again[1][0] == "success" and taken[-1] is not None
