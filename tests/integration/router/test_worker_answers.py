"""A worker's tool answer is parsed once (router/record/worker_answer.py): the call's refId is set
on the parsed result, wherever the worker put its ``_meta`` and however it spelled its JSON, and
the client and the record get the same result with the same refId. The worker is scripted, so
each answer is exactly the bytes a worker could write."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from router.http import exchange as exchange_module
from router.record import rows
from router.record.worker_answer import read_answer
from router.upstream.pool import UpstreamPool
from tests.support import REF_KEY, RawClient, RouterThread, wait_recorded
from tests.support.scripted_worker import ScriptedWorker, http_answer

PAGE_URL: Final = "http://127.0.0.1:9/answers"
TEXT: Final = f"### Page\n- Page URL: {PAGE_URL}\n- Page Title: Answers\n### Snapshot\n```yaml\n- ok [ref=e1]\n```"
CONTENT: Final = [{"type": "text", "text": TEXT}]


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def spaced(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)  # newlines and spaces between tokens


# Each result as the worker writes it: the JSON text of its result member, and what it holds.
SHAPES: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "_meta first": (
        '{"_meta":{"x":1},"content":' + compact(CONTENT) + "}",
        {"_meta": {"x": 1}, "content": CONTENT},
    ),
    "_meta last": (
        '{"content":' + compact(CONTENT) + ',"_meta":{"x":1}}',
        {"content": CONTENT, "_meta": {"x": 1}},
    ),
    "no _meta": ('{"content":' + compact(CONTENT) + "}", {"content": CONTENT}),
    "_meta not an object": ('{"content":' + compact(CONTENT) + ',"_meta":null}', {"content": CONTENT, "_meta": None}),
    "spaces and newlines": (
        spaced({"content": CONTENT, "_meta": {"x": 1}}),
        {"content": CONTENT, "_meta": {"x": 1}},
    ),
    "a tool error": (
        '{"content":[{"type":"text","text":"### Error\\nno such ref"}],"isError":true}',
        {"content": [{"type": "text", "text": "### Error\nno such ref"}], "isError": True},
    ),
    "non-ASCII and escapes": (
        '{"content":[{"type":"text","text":"L\\u2019\\u00e9l\\u00e8ve \\"q\\" \\\\ \\ud83d\\ude00"}]}',
        {"content": [{"type": "text", "text": 'L’élève "q" \\ 😀'}]},
    ),
}


@pytest.fixture(scope="module")
def router(rec_router: RouterThread) -> RouterThread:
    return rec_router


@pytest.fixture(scope="module")
def scripted(router: RouterThread) -> Iterator[tuple[RawClient, ScriptedWorker]]:
    """A session whose worker connection leads to a scripted worker."""
    with RawClient(router.url) as client, ScriptedWorker(sse_answer(0, '{"content":[]}')) as worker:
        client.initialize()
        client.start_worker()
        session = router.manager.sessions.get(client.session_id)
        assert session.connection is not None
        session.connection.upstream = UpstreamPool("127.0.0.1", worker.port, "/mcp")
        yield client, worker
        client.delete()


def sse_answer(request_id: Any, result: str, *, spaced_message: bool = False) -> bytes:
    if spaced_message:
        data = '{\n  "result": ' + result + ',\n  "jsonrpc": "2.0",\n  "id": ' + json.dumps(request_id) + "\n}"
    else:
        data = '{"result":' + result + ',"jsonrpc":"2.0","id":' + json.dumps(request_id) + "}"
    # A multi-line JSON text is one event of several data lines.
    event = "event: message\n" + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n"
    return http_answer(200, event.encode(), {"content-type": "text/event-stream"})


def json_answer(request_id: Any, result: str) -> bytes:
    body = '{"jsonrpc": "2.0", "id": ' + json.dumps(request_id) + ', "result": ' + result + "}"
    return http_answer(200, body.encode(), {"content-type": "application/json"})


def call_body(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"a key twice: {keys}"
    return dict(pairs)


def answer_of(response: Any) -> dict[str, Any]:
    """The one JSON-RPC message of an answer (SSE or JSON), each object's keys checked unique."""
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        (event,) = [chunk for chunk in text.split("\n\n") if "data:" in chunk]
        text = "\n".join(line[len("data: "):] for line in event.split("\n") if line.startswith("data: "))
    answer: dict[str, Any] = json.loads(text, object_pairs_hook=no_duplicate_keys)
    return answer


def row_of(router: RouterThread, ref: str) -> tuple[str, dict[str, Any]]:
    wait_recorded(router)
    with sqlite3.connect(Path(router.settings.state_dir) / "router.db") as db:
        row = db.execute("SELECT status, result FROM responses WHERE ref_id = ?", (ref,)).fetchone()
    assert row is not None, ref
    return row[0], json.loads(row[1], object_pairs_hook=no_duplicate_keys)


def served(
    router: RouterThread, scripted: tuple[RawClient, ScriptedWorker], request_id: Any, worker_answer: bytes
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The client's answer, and the status and result of its row."""
    client, worker = scripted
    worker.answers.append(worker_answer)
    r = client.post(call_body(request_id))
    assert r.status_code == 200
    answer = answer_of(r)
    assert answer["id"] == request_id and answer["jsonrpc"] == "2.0"
    ref = answer["result"]["_meta"][REF_KEY]
    status, kept = row_of(router, ref)
    return answer, status, kept


def expected(result: dict[str, Any], ref: str) -> dict[str, Any]:
    """``result`` with the call's refId added to its ``_meta``, the worker's own keys kept."""
    meta = result.get("_meta")
    return {**result, "_meta": {**(meta if isinstance(meta, dict) else {}), REF_KEY: ref}}


@pytest.mark.parametrize("request_id", [41, "s-41"], ids=["number id", "string id"])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_refid_reaches_the_client_and_the_record_wherever_meta_sits(
    router: RouterThread, scripted: tuple[RawClient, ScriptedWorker], shape: str, request_id: Any
) -> None:
    written, result = SHAPES[shape]
    assert json.loads(written) == result  # the shape says what it holds
    answer, status, kept = served(router, scripted, request_id, sse_answer(request_id, written))
    ref = answer["result"]["_meta"][REF_KEY]
    assert answer["result"] == expected(result, ref)
    assert kept == answer["result"]  # the record keeps what the client got, refId and all
    assert status == ("error" if result.get("isError") else "success")


@pytest.mark.parametrize("shape", ["_meta first", "_meta last", "no _meta"])
def test_a_message_spread_over_lines_or_sent_as_json_gets_its_refid_too(
    router: RouterThread, scripted: tuple[RawClient, ScriptedWorker], shape: str
) -> None:
    written, result = SHAPES[shape]
    for n, worker_answer in enumerate([sse_answer(50, spaced(result), spaced_message=True), json_answer(51, written)]):
        answer, _, kept = served(router, scripted, 50 + n, worker_answer)
        ref = answer["result"]["_meta"][REF_KEY]
        assert answer["result"] == expected(result, ref) == kept


def test_refids_are_the_calls_own(router: RouterThread, scripted: tuple[RawClient, ScriptedWorker]) -> None:
    refs = [served(router, scripted, 60 + n, sse_answer(60 + n, SHAPES["_meta first"][0]))[0] for n in range(3)]
    ids = [answer["result"]["_meta"][REF_KEY] for answer in refs]
    assert len(set(ids)) == 3


def test_an_answer_is_parsed_once_and_its_row_not_read_again(
    router: RouterThread, scripted: tuple[RawClient, ScriptedWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The continuity's look for a crashed page (the session has a page) reads the answer before
    # it is taken; what the session learns (the page URL) comes from that same reading, and the
    # record's row is written from it, not parsed on the writer thread.
    parsed: list[bytes] = []
    read_rows: list[Any] = []
    monkeypatch.setattr(
        exchange_module, "read_answer", lambda payload, *a, **k: parsed.append(payload) or read_answer(payload, *a, **k)
    )
    monkeypatch.setattr(rows, "tool_result", lambda raw: read_rows.append(raw) or None)
    client, _ = scripted
    session = router.manager.sessions.get(client.session_id)
    session.current_url = "http://127.0.0.1:9/before"
    answer, status, kept = served(router, scripted, 70, sse_answer(70, SHAPES["_meta last"][0]))
    assert len(parsed) == 1 and status == "success" and kept == answer["result"]
    assert session.current_url == PAGE_URL
    assert read_rows == []


@pytest.mark.parametrize(
    "tail",
    ['"id":42}', '"id":"41"}', '"id":041}'],
    ids=["another request's id", "the id as a string", "a number JSON refuses"],
)
def test_an_answer_that_is_not_the_calls_own_is_not_taken(
    router: RouterThread, scripted: tuple[RawClient, ScriptedWorker], tail: str
) -> None:
    # Relayed as it came; the call gets an error saying its answer never came, and the session
    # goes on.
    client, worker = scripted
    event = 'event: message\ndata: {"result":{"content":[]},"jsonrpc":"2.0",' + tail + "\n\n"
    worker.answers.append(http_answer(200, event.encode(), {"content-type": "text/event-stream"}))
    r = client.post(call_body(41))
    assert r.status_code == 200
    assert '"content":[]' in r.text and "without an answer to this request" in r.text
    _, status, _ = served(router, scripted, 43, sse_answer(43, SHAPES["no _meta"][0]))
    assert status == "success"
