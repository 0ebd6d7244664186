"""File names in tool calls through a router whose sessions share workers: each session's are
kept to its own folder of the host's output dir (router/http/file_arguments.py)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from router.http.exchange import INVALID_PARAMS
from router.layout import own_folder
from router.sessions.table import State
from tests.support import (
    STANDIN_WORKER_COMMAND,
    RawClient,
    RouterThread,
    messages_of,
    router_settings,
    wait_for,
    wait_recorded,
)
from tests.support.hosted import host_output, two_clients
from workers.orphans import processes_for

STORAGE_TOOLS: Final = ["browser_storage_state", "browser_set_storage_state"]
IDLE_TIMEOUT: Final = 600.0  # a test reaps on purpose, by lowering it for a moment


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("shared-files")
    settings = router_settings(
        state, worker_command=STANDIN_WORKER_COMMAND, sessions_per_browser=3, record=True,
        allow_tools=STORAGE_TOOLS, idle_timeout=IDLE_TIMEOUT,
    )  # fmt: skip
    with RouterThread(settings) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=15)


@pytest.fixture
def pair(shared: RouterThread) -> Iterator[tuple[RawClient, RawClient]]:
    with two_clients(shared) as clients:
        yield clients


def recorded_arguments(router: RouterThread, client: RawClient, tool: str) -> list[Any]:
    wait_recorded(router)
    with sqlite3.connect(Path(router.settings.state_dir) / "router.db") as conn:
        rows = conn.execute(
            "SELECT params FROM requests WHERE session_id = ? AND tool = ? ORDER BY rowid", (client.session_id, tool)
        ).fetchall()
    return [json.loads(params)["arguments"] for (params,) in rows]


def test_a_named_file_lands_in_the_own_folder_as_sent_and_recorded(
    shared: RouterThread, pair: tuple[RawClient, RawClient]
) -> None:
    a, b = pair
    assert "Saved." in a.text("browser_storage_state", filename="state.json")
    out = host_output(shared, a)
    saved = own_folder(out, a.session_id) / "state.json"
    assert json.loads(saved.read_text())["cookies"][0]["name"] == "clicks"
    assert not (out / "state.json").exists()
    assert recorded_arguments(shared, a, "browser_storage_state") == [{"filename": str(saved)}]
    assert a.session_id not in str(saved), "the folder never shows the session id"
    # B on the same host, the same plain name: its own file, not A's.
    assert "Saved." in b.text("browser_storage_state", filename="state.json")
    assert host_output(shared, b) == out and (own_folder(out, b.session_id) / "state.json").is_file()
    assert "Restored." in a.text("browser_set_storage_state", filename="state.json")


def test_another_sessions_file_is_refused_with_a_json_rpc_error_and_never_sent(
    shared: RouterThread, pair: tuple[RawClient, RawClient]
) -> None:
    a, b = pair
    a.text("browser_tabs", action="list")
    theirs = own_folder(host_output(shared, a), a.session_id) / "state.json"
    assert "Saved." in a.text("browser_storage_state", filename=str(theirs))
    theirs.write_text('{"cookies": [], "origins": [], "mark": "A"}')
    for tool, name in [
        ("browser_set_storage_state", str(theirs)),
        ("browser_set_storage_state", f"../{theirs.parent.name}/state.json"),
        ("browser_storage_state", str(theirs)),  # overwriting it
    ]:
        params = {"name": tool, "arguments": {"filename": name}}
        response = b.post({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": params})
        assert response.status_code == 200, response.text
        (answer,) = messages_of(response)
        assert answer["id"] == 77 and answer["error"]["code"] == INVALID_PARAMS, answer
        assert "own folder" in answer["error"]["message"] and b.session_id not in answer["error"]["message"]
    assert json.loads(theirs.read_text())["mark"] == "A", "the worker never got the write"
    refused = recorded_arguments(shared, b, "browser_storage_state")
    assert refused == [{"filename": str(theirs)}], "a refused call is recorded as the client sent it"


def test_a_call_waiting_for_its_session_to_resume_is_recorded_as_sent(
    shared: RouterThread, pair: tuple[RawClient, RawClient]
) -> None:
    """A reaped session's call is recorded before it is given a host; its file name is changed
    only then: the record waits for the change."""
    a, _ = pair
    a.text("browser_storage_state", filename="first.json")
    upkeep = shared.manager.upkeep
    idle, upkeep.idle_timeout = upkeep.idle_timeout, 0.3
    try:
        wait_for(lambda: shared.manager.sessions.get(a.session_id).state is State.REAPED, timeout=15)
    finally:
        upkeep.idle_timeout = idle
    assert shared.manager.sessions.get(a.session_id).connection is None
    a.text("browser_storage_state", filename="second.json")
    second = own_folder(host_output(shared, a), a.session_id) / "second.json"
    assert second.is_file()
    assert recorded_arguments(shared, a, "browser_storage_state")[-1] == {"filename": str(second)}


def test_a_sessions_folder_goes_when_it_leaves_its_host(
    shared: RouterThread, pair: tuple[RawClient, RawClient]
) -> None:
    a, b = pair
    a.text("browser_storage_state", filename="kept.json")
    b.text("browser_storage_state", filename="kept.json")
    out = host_output(shared, a)
    mine, theirs = own_folder(out, a.session_id), own_folder(out, b.session_id)
    assert (mine / "kept.json").is_file() and (theirs / "kept.json").is_file()
    upkeep = shared.manager.upkeep
    upkeep.idle_timeout = 0.3
    try:
        session = shared.manager.sessions.get(a.session_id)
        assert session is not None
        wait_for(lambda: session.state is State.REAPED, timeout=10)
    finally:
        upkeep.idle_timeout = IDLE_TIMEOUT
    wait_for(lambda: not mine.exists(), timeout=10)
    assert b.delete().status_code == 200
    wait_for(lambda: not theirs.exists(), timeout=10)
