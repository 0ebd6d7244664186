"""Input a client (or a page) can send that used to cost a 500, the record or the router's memory:
lone UTF-16 surrogates (valid JSON syntax, not Unicode text), JSON nested past the recursion
limit, session ids the router could not have minted, made-up protocol versions."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from router.errors import ParseError
from router.protocol.messages import MAX_JSON_DEPTH, parse
from router.record.recorder import Recorder
from router.sessions import statefiles
from router.sessions.handshake import HandshakeCache
from router.sessions.table import Session, mint_session_id
from router.types import ACTION_HEADER, HANDSHAKE_VERSIONS
from tests.support import RawClient, RouterThread, initialize_body, messages_of

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
SESSION_NOT_FOUND: Final = -32001
# Strings that are not ids this router mints: a path's pieces, a leading dot, characters outside
# [A-Za-z0-9_.-]. Each used to reach StateLayout.session_dir and its ValueError (500).
FOREIGN_IDS: Final = ("abc!defghijklmnopqrstu", ".hidden-0123456789abcdef", "..0123456789abcdef", "0123456789abcdef~")


def raw_initialize(name_json: str) -> bytes:
    """An initialize whose clientInfo.name is the JSON text ``name_json`` as written (escapes kept)."""
    body = json.dumps(initialize_body(name="NAME"))
    return body.replace('"NAME"', name_json).encode()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    error: dict[str, Any] = response.json()["error"]
    return error


# -- lone surrogates ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ['"evil\\ud800"', '"\\uDFFF"', '"a\\udbff\\u0041"', '"\\udc00\\ud800"'])
def test_a_lone_surrogate_is_refused_at_parse(rec_router: RouterThread, name: str) -> None:
    with RawClient(rec_router.url) as client:
        before = len(rec_router.manager.sessions)
        response = client.post(raw_initialize(name))
        assert response.status_code == 400
        assert error_of(response)["code"] == PARSE_ERROR
        assert len(rec_router.manager.sessions) == before  # no session was opened
        assert client.http.get(f"{rec_router.base_url}/api/sessions").status_code == 200


def message_with(params_json: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + params_json + b"}"


@pytest.mark.parametrize(
    "params",
    [b'{"a":"evil\\ud800"}', b'{"\\uDFFF":1}', b'{"a":["x",{"k":["\\udc00"]}]}', b'{"a":"\xed\xa0\x80"}'],
    ids=["escape", "key", "nested", "utf8-bytes"],
)
def test_parse_refuses_lone_surrogates(params: bytes) -> None:
    with pytest.raises(ParseError, match="surrogate"):
        parse(message_with(params))


@pytest.mark.parametrize(
    "params",
    [b'{"a":"\\ud83d\\ude00"}', b'{"a":"\\\\ud800"}', '{"a":"한국"}'.encode(),
     b'{"a":' + nested(MAX_JSON_DEPTH - 2).encode() + b"}"],
    ids=["pair", "escaped-backslash", "hangul-bytes", "at-the-limit"],
)  # fmt: skip
def test_parse_takes_text_and_nesting_within_the_rules(params: bytes) -> None:
    assert parse(message_with(params)).method == "ping"


def test_a_surrogate_pair_and_an_escaped_backslash_u_are_text(rec_router: RouterThread) -> None:
    with RawClient(rec_router.url) as client:
        response = client.post(raw_initialize('"smile \\ud83d\\ude00 \\\\ud800"'))
        assert response.status_code == 200, response.text
        client.session_id = response.headers["mcp-session-id"]
        ping = client.post(b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":{"x":"\\ud800"}}}')
        assert ping.status_code == 400 and error_of(ping)["code"] == PARSE_ERROR
        listed = client.http.get(f"{rec_router.base_url}/api/sessions/{client.session_id}")
        assert listed.status_code == 200
        assert listed.json()["session"]["client"].startswith("smile \U0001f600 \\ud800")
        client.delete()


def test_the_api_answers_for_a_session_whose_saved_params_hold_a_surrogate(rec_router: RouterThread) -> None:
    """A session.json written before parse refused them (json.dumps escapes the surrogate)."""
    session_id = mint_session_id()
    params = initialize_body(name="old\ud800")["params"]
    statefiles.write_session_file(
        Path(rec_router.settings.state_dir) / "sessions" / session_id,
        {"id": session_id, "initialize": params, "response_mode": "full", "client_info": params["clientInfo"],
         "protocol_version": params["protocolVersion"], "created": time.time()},
    )  # fmt: skip
    with RawClient(rec_router.url) as client:
        client.session_id = session_id
        assert client.request("ping")["result"] == {}  # the session is loaded from disk
        for path in ("/api/sessions", f"/api/sessions/{session_id}"):
            response = client.http.get(f"{rec_router.base_url}{path}")
            assert response.status_code == 200, (path, response.text)
        assert response.json()["session"]["client"].startswith("old\ud800")
        client.delete()


async def test_the_record_keeps_rows_whose_text_holds_a_surrogate(tmp_path: Path) -> None:
    """Text from a page (browser_evaluate's result) can hold one too: SQLite takes only UTF-8."""
    db = tmp_path / "router.db"
    recorder = Recorder(db)
    async with recorder.run():
        recorder.session_opened("s1", client_info={"name": "evil\ud800"}, protocol_version="2025-06-18",
                                port=None, pid=None)  # fmt: skip
        recorder.request("r1", "s1", "tools/call", "browser_evaluate", {"function": "() => '\udfff'"})
        recorder.response("r1", status="success", result={"content": [{"type": "text", "text": "a\ud800b"}]},
                          duration_ms=1.0)  # fmt: skip
        assert await recorder.flush()
    with sqlite3.connect(db) as conn:
        [(client_info,)] = conn.execute("SELECT client_info FROM sessions WHERE id = 's1'").fetchall()
        assert conn.execute("SELECT params FROM requests WHERE ref_id = 'r1'").fetchone() is not None
        [(result,)] = conn.execute("SELECT result FROM responses WHERE ref_id = 'r1'").fetchall()
    assert json.loads(client_info) == {"name": "evil\ud800"}  # as it came
    assert json.loads(result)["content"][0]["text"] == "a\ud800b"


# -- session ids -------------------------------------------------------------------------------


@pytest.mark.parametrize("session_id", FOREIGN_IDS)
def test_an_id_the_router_could_not_have_minted_is_unknown(fake_router: RouterThread, session_id: str) -> None:
    with RawClient(fake_router.url) as client:
        client.session_id = session_id
        for response in (
            client.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            client.http.get(fake_router.url, headers=client.headers(accept="text/event-stream")),
            client.delete(),
        ):
            assert response.status_code == 404, (response.request.method, response.text)
            assert error_of(response)["code"] == SESSION_NOT_FOUND
        for action in ("end", "hibernate"):
            response = client.http.post(
                f"{fake_router.base_url}/api/sessions/{session_id}/{action}", headers={ACTION_HEADER: "1"}
            )
            assert response.status_code == 404, response.text
            assert "error" in response.json()


# -- nesting -----------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 980, 5000])
def test_json_nested_too_deep_is_refused_and_opens_no_session(fake_router: RouterThread, depth: int) -> None:
    with RawClient(fake_router.url) as client:
        before = len(fake_router.manager.sessions)
        body = initialize_body()
        body["params"]["capabilities"] = {"experimental": "DEEP"}
        response = client.post(json.dumps(body).replace('"DEEP"', nested(depth)).encode())
        assert response.status_code == 400, response.text
        assert error_of(response)["code"] == INVALID_REQUEST
        assert str(MAX_JSON_DEPTH) in error_of(response)["message"]
        assert len(fake_router.manager.sessions) == before


def test_tool_arguments_nested_within_the_limit_pass(fake_router: RouterThread) -> None:
    with RawClient(fake_router.url) as client:
        client.initialize()
        # A form of many fields (browser_fill_form's shape) with room to spare in depth.
        deep: Any = "leaf"
        for _ in range(MAX_JSON_DEPTH - 8):
            deep = [deep]
        fields = [{"name": f"f{i}", "type": "textbox", "ref": f"e{i}", "value": "v"} for i in range(200)]
        text = json.dumps({"fields": fields, "deep": deep})
        assert client.text("echo", text=text) == text
        client.delete()


def test_a_session_file_that_cannot_be_written_does_not_raise(tmp_path: Path) -> None:
    deep: Any = {}
    for _ in range(5000):
        deep = {"x": deep}
    session = Session(mint_session_id(), initialize_params={"capabilities": deep})
    assert statefiles.keep_session(tmp_path / session.id, session) is False
    assert not (tmp_path / session.id / statefiles.SESSION_FILE).exists()


# -- protocol versions -------------------------------------------------------------------------


def test_the_handshake_cache_keeps_only_the_versions_the_router_speaks(tmp_path: Path) -> None:
    cache = HandshakeCache(tmp_path, "f" * 64)
    made_up = "9999-" + "x" * 100_000
    cache.store(made_up, {"protocolVersion": "2025-06-18"}, {"tools": []})
    assert cache.get(made_up) is None
    assert not cache.path.exists()
    known = sorted(HANDSHAKE_VERSIONS)[-1]
    cache.store(known, {"protocolVersion": known}, {"tools": []})
    # A file that holds a made-up version (an earlier router wrote it) is read without it.
    data = json.loads(cache.path.read_text())
    data["versions"][made_up] = data["versions"][known]
    cache.path.write_text(json.dumps(data))
    again = HandshakeCache(tmp_path, "f" * 64)
    assert again.versions() == {known}
    assert again.get(made_up) is None


def test_a_made_up_version_is_answered_by_a_worker_and_never_cached(fake_router: RouterThread) -> None:
    made_up = "2099-01-01-" + "y" * 1000
    with RawClient(fake_router.url) as client:
        response = client.post(initialize_body(version=made_up))
        assert response.status_code == 200, response.text
        client.session_id = response.headers["mcp-session-id"]
        assert messages_of(response)[-1]["result"]["protocolVersion"] in HANDSHAKE_VERSIONS  # the worker's choice
        assert client.request("tools/list")["result"]["tools"]
        assert fake_router.manager.handshakes.versions() <= HANDSHAKE_VERSIONS
        client.delete()
    assert made_up not in Path(fake_router.manager.handshakes.path).read_text()

