"""What a resume left out is kept through the next saves (router/sessions/unrestored.py): the
merge rules, how far a restore got when it failed or was cut short, and a save laying the
browser's state over what is kept (the real browser's side: tests/e2e/test_claude_code.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from router.layout import StateLayout
from router.sessions import statefiles
from router.sessions.control import ControlError, ControlSession
from router.sessions.restore import RestoreProgress, restore_browser
from router.sessions.state_save import BrowserStateSaver
from router.sessions.table import Session
from router.sessions.unrestored import Unrestored, left_out, merged_storage, merged_tabs
from router.upstream.connection import WorkerConnection
from tests.support.saved import SavingControl

A = "http://127.0.0.1:8000/a"
B = "http://127.0.0.1:8000/b"
C = "http://127.0.0.1:8000/c"
NOW = 1_800_000_000.0
CUT_AFTER = 0.3  # seconds: a restore stuck on a tab is cut short after this here


def cookie(name: str, value: str, *, domain: str = "127.0.0.1", expires: float = -1) -> dict[str, Any]:
    return {"name": name, "value": value, "domain": domain, "path": "/", "expires": expires}


def origin(url: str, **items: str) -> dict[str, Any]:
    return {"origin": url, "localStorage": [{"name": k, "value": v} for k, v in items.items()]}


SAVED: dict[str, Any] = {
    "storage": {"cookies": [cookie("sid", "old")], "origins": [origin("http://127.0.0.1:8000", k="v")]},
    "tabs": [A, B, C],
    "current": A,
    "ref_frame": 0,
}


def test_what_a_restore_left_out_depends_on_how_far_it_got() -> None:
    assert left_out(None, storage_done=False, tabs_done=False) is None  # nothing was saved
    assert left_out(SAVED, storage_done=True, tabs_done=True) is None  # all of it went in
    assert left_out(SAVED, storage_done=True, tabs_done=False) == Unrestored(None, (A, B, C))
    assert left_out(SAVED, storage_done=False, tabs_done=False) == Unrestored(SAVED["storage"], (A, B, C))


def test_the_browsers_cookies_win_and_the_kept_ones_it_lacks_stay() -> None:
    kept = {
        "cookies": [
            cookie("sid", "old"), cookie("theme", "dark"), cookie("gone", "x", expires=NOW - 1),
            cookie("later", "y", expires=NOW + 3600),
        ],
        "origins": [origin("http://a.test", k="kept", only="kept"), origin("http://b.test", b="1")],
    }  # fmt: skip
    current = {"cookies": [cookie("sid", "new"), cookie("sid", "other", domain="a.test")],
               "origins": [origin("http://a.test", k="new")]}  # fmt: skip
    merged = merged_storage(kept, current, now=NOW)
    values = {(c["name"], c["domain"]): c["value"] for c in merged["cookies"]}
    assert values == {
        ("sid", "127.0.0.1"): "new", ("sid", "a.test"): "other", ("theme", "127.0.0.1"): "dark",
        ("later", "127.0.0.1"): "y",
    }  # fmt: skip  # the expired kept cookie is not brought back
    by_origin = {o["origin"]: {i["name"]: i["value"] for i in o["localStorage"]} for o in merged["origins"]}
    assert by_origin == {"http://a.test": {"k": "new", "only": "kept"}, "http://b.test": {"b": "1"}}
    assert current["origins"] == [origin("http://a.test", k="new")]  # the browser's own left as it was
    assert kept["origins"][0] == origin("http://a.test", k="kept", only="kept")  # and what is kept


def test_a_kept_cookie_of_another_partition_or_an_origin_kept_twice() -> None:
    partitioned = {**cookie("sid", "chip"), "partitionKey": "http://top.test"}
    merged = merged_storage({"cookies": [partitioned], "origins": [origin("http://b.test", a="1"),
                                                                   origin("http://b.test", b="2")]},
                            {"cookies": [cookie("sid", "plain")], "origins": []}, now=NOW)  # fmt: skip
    assert [c["value"] for c in merged["cookies"]] == ["plain", "chip"]
    assert merged["origins"] == [origin("http://b.test", a="1", b="2")]


def test_the_browsers_tabs_keep_their_places_and_the_missing_ones_follow() -> None:
    assert merged_tabs([A, B, C], [A, B]) == [A, B, C]
    assert merged_tabs(["about:blank", C], [B]) == [B, C]
    assert merged_tabs([A, A, B], [A]) == [A, A, B]  # a page open twice stays open twice
    assert merged_tabs([], ["about:blank"]) == ["about:blank"]  # nothing kept: the browser's as they are


def test_a_blank_tab_or_a_restore_document_does_not_push_the_kept_tabs_along() -> None:
    """A failed restore leaves the browser on a blank tab, or a cut one on the restore's own
    document: saved ahead of the kept tabs, it would shift them and stay for good."""
    restore_doc = "http://127.0.0.1:8000/__mcp_router_storage_restore__"
    assert merged_tabs([A, B], ["about:blank"]) == [A, B]
    assert merged_tabs([A, B], [restore_doc, C]) == [C, A, B]


class Control:
    """A control session whose calls succeed, except those ``fail`` names (an error) and those
    ``hang`` names (never answered: pages that never load)."""

    def __init__(self, *, fail: frozenset[str] = frozenset(), hang: str | None = None) -> None:
        self.fail = fail
        self.hang = hang
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        self.calls.append((name, arguments or {}))
        if name in self.fail:
            raise ControlError(f"{name} refused")
        if self.hang is not None and self.hang in str(arguments):
            await anyio.sleep_forever()
        return ""


def saved_in(tmp_path: Path) -> Path:
    session_dir = tmp_path / "session"
    statefiles.write_state(session_dir, SAVED)
    return session_dir


async def test_a_refused_storage_call_leaves_the_storage_and_the_tabs_out(tmp_path: Path) -> None:
    progress = RestoreProgress()
    control = Control(fail=frozenset({"browser_set_storage_state"}))
    with pytest.raises(ControlError):
        await restore_browser(saved_in(tmp_path), cast(ControlSession, control), tmp_path, fresh_profile=True,
                              progress=progress)  # fmt: skip
    assert progress.left_out() == Unrestored(SAVED["storage"], (A, B, C))


async def test_a_restore_cut_short_on_a_tab_leaves_only_the_tabs_out(tmp_path: Path) -> None:
    progress = RestoreProgress()
    control = Control(hang=B)
    with anyio.move_on_after(CUT_AFTER):
        await restore_browser(saved_in(tmp_path), cast(ControlSession, control), tmp_path, fresh_profile=True,
                              progress=progress)  # fmt: skip
    assert ("browser_tabs", {"action": "new", "url": B}) in control.calls  # it got as far as B
    assert progress.left_out() == Unrestored(None, (A, B, C))


@pytest.mark.parametrize("kept", [True, False])
async def test_a_save_lays_the_browser_over_what_the_resume_left_out(tmp_path: Path, kept: bool) -> None:
    layout = StateLayout(tmp_path / "state")
    session = Session(id="s1", browser_used=True)
    session.unrestored = Unrestored(SAVED["storage"], (A, B, C)) if kept else None
    worker = SimpleNamespace(alive=lambda: True, output_dir=tmp_path / "output")
    worker.output_dir.mkdir()
    control = SavingControl({"cookies": [cookie("token", "t")], "origins": []}, [A])
    connection = cast(WorkerConnection, SimpleNamespace(worker=worker))
    await BrowserStateSaver(layout).save(session, connection, cast(ControlSession, control))
    state = statefiles.read_state(layout.session_dir("s1"))
    assert state is not None
    names = sorted(c["name"] for c in state["storage"]["cookies"])
    if kept:  # the login the resume did not bring back is still saved, beside the new cookie
        assert names == ["sid", "token"] and state["tabs"] == [A, B, C]
        assert state["storage"]["origins"] == SAVED["storage"]["origins"]
    else:  # without it, a save is what the browser holds (the bug this guards against)
        assert names == ["token"] and state["tabs"] == [A]
