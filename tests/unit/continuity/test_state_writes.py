"""A state save writes ``state.json`` only when what it holds changed: the save after a click that
changed nothing (the most common kind in a conversation) writes nothing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from router.layout import StateLayout
from router.sessions import statefiles
from router.sessions.control import ControlSession
from router.sessions.state_save import BrowserStateSaver
from router.sessions.table import Session
from router.upstream.connection import WorkerConnection
from tests.support.saved import SavingControl

A = "http://127.0.0.1:8000/a"
STATE: dict[str, Any] = {"storage": {"cookies": [], "origins": []}, "tabs": [A], "current": A, "ref_frame": 0}


def test_the_same_state_is_not_written_twice_unless_the_file_is_gone(tmp_path: Path) -> None:
    path = tmp_path / statefiles.STATE_FILE
    digest, written = statefiles.write_state(tmp_path, STATE)
    kept = statefiles.read_state(tmp_path)
    assert written and kept is not None and {k: v for k, v in kept.items() if k != "saved"} == STATE
    first = path.read_bytes()
    assert statefiles.write_state(tmp_path, dict(STATE), unless=digest) == (digest, False)
    assert path.read_bytes() == first  # not even its save time moved
    changed = {**STATE, "current": A + "?next"}
    new_digest, written = statefiles.write_state(tmp_path, changed, unless=digest)
    kept = statefiles.read_state(tmp_path)
    assert written and new_digest != digest and kept is not None and kept["current"] == A + "?next"
    path.unlink()  # gone (by hand, say): the same state is written again
    assert statefiles.write_state(tmp_path, changed, unless=new_digest) == (new_digest, True) and path.exists()


async def test_a_save_that_finds_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path / "state")
    session = Session(id="s1", browser_used=True)
    worker = SimpleNamespace(alive=lambda: True, output_dir=tmp_path / "output")
    worker.output_dir.mkdir()
    connection = cast(WorkerConnection, SimpleNamespace(worker=worker))
    control = SavingControl({"cookies": [], "origins": []}, [A])
    saver = BrowserStateSaver(layout)
    state_file = layout.state_file("s1")

    await saver.save(session, connection, cast(ControlSession, control))
    first = state_file.read_bytes()
    await saver.save(session, connection, cast(ControlSession, control))
    assert (saver.written, saver.unchanged) == (1, 1) and state_file.read_bytes() == first

    control.storage = {"cookies": [{"name": "sid", "value": "1", "domain": "127.0.0.1", "path": "/"}], "origins": []}
    await saver.save(session, connection, cast(ControlSession, control))
    assert (saver.written, saver.unchanged) == (2, 1)
    state = statefiles.read_state(layout.session_dir("s1"))
    assert state is not None and state["storage"]["cookies"][0]["value"] == "1"
