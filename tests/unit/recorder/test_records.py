from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
import pytest

from router.cli.main import main
from router.cli.tables import format_sessions_table, format_timeline
from router.layout import StateLayout
from router.record.recorder import Recorder
from router.record.records import NoSnapshot, RecordNotFound, Records
from tests.support.recorded import Answers


def _record_flow(rec: Recorder, answers: Answers) -> None:
    """Session s1 (navigate, click, click2, tabs, a failed click); s2 (snapshot); s1b child of s1."""
    rec.session_opened("s1", client_info={"name": "claude-code", "version": "2.1"},
                       protocol_version="2025-06-18", port=20001, pid=11)
    rec.session_opened("s2", client_info={"name": "other"}, protocol_version="2025-06-18", port=20002, pid=12)
    rec.session_opened("s1b", client_info=None, protocol_version=None, port=20003, pid=13, parent_id="s1")
    rec.request("init", "s1", "initialize", None, {"protocolVersion": "2025-06-18"})
    rec.response("init", status="success", result='{"protocolVersion":"2025-06-18"}', duration_ms=30)
    for ref, session, name, tool, args in [
        ("nav", "s1", "navigate", "browser_navigate", {"url": "http://127.0.0.1:8765/index.html"}),
        ("click", "s1", "click", "browser_click", {"target": "e3"}),
        ("click2", "s1", "click2", "browser_click", {"target": "e3"}),
        ("tabs", "s1", "tabs", "browser_tabs", {"action": "list"}),
        ("bad", "s1", "click_bad", "browser_click", {"target": "e999"}),
        ("snap", "s2", "snapshot", "browser_snapshot", {}),
        ("child", "s1b", "console", "browser_console_messages", {"level": "debug"}),
    ]:
        rec.request(ref, session, "tools/call", tool, {"name": tool, "arguments": args})
        result = answers.result(name)
        rec.response(ref, status="error" if result.get("isError") else "success", result=json.dumps(result),
                     duration_ms=12.5, output_dir=answers.output_dir,
                     error="Ref e999 not found" if result.get("isError") else None)


@pytest.fixture
async def records(recorder: Recorder, answers: Answers) -> AsyncIterator[Records]:
    _record_flow(recorder, answers)
    assert recorder.records is not None
    yield recorder.records


async def test_read_content_cursor_rules(records: Records, answers: Answers) -> None:
    whole = answers.file("page-", 0)
    assert await records.read_content("s1", "nav") == whole  # first read: whole
    assert await records.read_content("s1", "nav") == ""  # nothing changed since: empty, no error
    assert await records.read_content("s1", "nav", reset_cursor=True) == whole
    assert await records.read_content("s1", "nav") == ""
    # The cursor is per session: the same ref read from the child session starts whole.
    assert await records.read_content("s1b", "nav") == whole


async def test_since_ref_diffs_two_calls(records: Records, answers: Answers) -> None:
    diff = await records.read_content("s1", "click2", since_ref="click")
    lines = diff.split("\n")
    assert "-  - paragraph [ref=e4]: Clicked 1" in lines and "+  - paragraph [ref=e4]: Clicked 2" in lines
    assert await records.read_content("s1", "click", since_ref="click") == ""
    # since_ref does not touch the cursor: a plain read afterwards is still a first read.
    assert await records.read_content("s1", "click2") == answers.file("page-", 2)


async def test_search_for_is_applied_last(records: Records) -> None:
    found = await records.read_content("s1", "nav", search_for="alpha")
    assert found == "- generic [active] [ref=e1]:\n  - list [ref=e5]:\n    - listitem [ref=e6]: Alpha"
    assert await records.read_content("s1", "nav", search_for="link") != ""  # a search is a peek
    diff = await records.read_content("s1", "click2", since_ref="nav", search_for="paragraph")
    assert diff.split("\n")[1:] == [
        "-  - paragraph [ref=e4]: Not clicked", "+  - paragraph [ref=e4]: Clicked 2"
    ]


async def test_foreign_and_unknown_refs_are_not_found(records: Records) -> None:
    with pytest.raises(RecordNotFound):
        await records.read_content("s2", "nav")  # s1's ref from another conversation
    with pytest.raises(RecordNotFound):
        await records.read_content("s1", "snap")
    with pytest.raises(RecordNotFound):
        await records.read_content("s1", "nav", since_ref="snap")
    with pytest.raises(RecordNotFound):
        await records.read_content("s1", "no-such-ref")
    with pytest.raises(RecordNotFound):
        await records.read_console("s2", "nav")
    with pytest.raises(RecordNotFound):
        await records.get_call("nav", session_id="s2")
    with pytest.raises(NoSnapshot):
        await records.read_content("s1", "tabs")
    # Same family (create_new_session): both directions are one conversation.
    assert "Alpha" in await records.read_content("s1b", "nav")
    assert "boom from page" in await records.read_console("s1", "child")


async def test_cursor_survives_a_restart(db_path: Path, answers: Answers) -> None:
    rec = Recorder(db_path)
    async with rec.run():
        _record_flow(rec, answers)
        assert rec.records is not None
        assert await rec.records.read_content("s1", "click") == answers.file("page-", 1)
    async with Recorder(db_path).run() as again:
        assert again.records is not None
        assert await again.records.read_content("s1", "click") == ""
        assert await again.records.read_content("s1", "click", reset_cursor=True) == answers.file("page-", 1)


async def test_read_console_levels(records: Records) -> None:
    everything = await records.read_console("s1", "nav")
    assert everything.split("\n") == [
        "[error] boom from page @ http://127.0.0.1:8765/index.html:5",
        "[info] hello log @ http://127.0.0.1:8765/index.html:5",
        "[info] info msg @ http://127.0.0.1:8765/index.html:5",
    ]
    assert await records.read_console("s1", "nav", "error") == everything.split("\n")[0]
    assert await records.read_console("s1", "tabs") == ""
    with pytest.raises(ValueError):
        await records.read_console("s1", "nav", "loud")


async def test_sessions_calls_and_reports(records: Records) -> None:
    sessions = {s["id"]: s for s in await records.list_sessions()}
    s1 = sessions["s1"]
    assert (s1["state"], s1["calls"], s1["requests"], s1["errors"]) == ("active", 5, 6, 1)
    assert s1["client"] == "claude-code 2.1" and sessions["s1b"]["parent_id"] == "s1"
    table = format_sessions_table(list(sessions.values()), tz=UTC)
    header, rule, *rows = table.split("\n")
    assert header.split() == ["ID", "STATE", "CREATED", "LAST", "ACTIVITY", "CALLS", "ERRORS", "CLIENT"]
    assert set(rule) <= {"-", " "} and len(rows) == 3
    row = next(r for r in rows if r.startswith("s1 "))
    assert row.split()[-4:] == ["5", "1", "claude-code", "2.1"]

    calls = await records.session_calls("s1")
    assert [c["ref_id"] for c in calls] == ["init", "nav", "click", "click2", "tabs", "bad"]
    assert calls[1]["has_snapshot"] and not calls[4]["has_snapshot"]
    timeline = format_timeline(calls, tz=UTC).split("\n")
    assert timeline[0].split() == ["TIME", "REF_ID", "CALL", "STATUS", "DURATION", "DETAIL"]
    nav = next(line for line in timeline if " nav " in line)
    assert "browser_navigate" in nav and "success" in nav and "12 ms" in nav and "index.html" in nav
    bad = next(line for line in timeline if " bad " in line)
    assert "error" in bad and "Ref e999 not found" in bad
    assert "initialize" in timeline[2]
    assert format_sessions_table([]) == "no sessions recorded"
    assert format_timeline([]) == "no calls recorded"


async def test_get_call_and_export(records: Records, answers: Answers) -> None:
    call = await records.get_call("nav")
    assert call["page_snapshot"] == answers.file("page-", 0)
    assert json.loads(call["result"]) == answers.result("navigate")
    assert [e["level"] for e in call["console"]] == ["error", "info", "info"]
    lines = [json.loads(line) async for line in records.export_session("s1")]
    assert lines[0]["type"] == "session" and lines[0]["id"] == "s1"
    assert lines[0]["client_info"] == {"name": "claude-code", "version": "2.1"}
    assert [x["ref_id"] for x in lines[1:]] == ["init", "nav", "click", "click2", "tabs", "bad"]
    assert lines[2]["page_snapshot"] == answers.file("page-", 0)
    with pytest.raises(RecordNotFound):
        [x async for x in records.export_session("nobody")]


async def test_readonly_records_for_the_cli(db_path: Path, answers: Answers) -> None:
    with pytest.raises(sqlite3.OperationalError):  # mode=ro: "unable to open database file"
        async with Records.open(db_path, readonly=True):
            pass
    assert not os.path.lexists(db_path)  # noqa: ASYNC240 - mode=ro never creates the file
    async with Recorder(db_path).run() as rec:
        _record_flow(rec, answers)
    async with Records.open(db_path, readonly=True) as ro:
        assert len(await ro.list_sessions()) == 3
        assert len(await ro.session_calls("s2")) == 1


def test_show_tells_why_the_session_resumed_and_where_its_files_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = StateLayout(tmp_path / "state")
    out = tmp_path / "out"
    out.mkdir()
    (out / "shot.png").write_bytes(b"\x89PNG shot")
    result = {"content": [{"type": "text", "text": f"### Result\n- [Screenshot of viewport]({out}/shot.png)"}]}

    async def record() -> None:
        async with Recorder(layout.db, layout=layout).run() as rec:
            rec.session_opened("s", client_info=None, protocol_version=None, port=1, pid=2)
            rec.request("before", "s", "tools/call", "browser_navigate", {})
            rec.response("before", status="success", result=result, duration_ms=1, output_dir=out)
            await rec.flush()
            rec.session_resumed("s", "idle")
            await rec.flush()
            rec.request("after", "s", "tools/call", "browser_click", {})
            rec.response("after", status="success", result={"content": []}, duration_ms=1)

    anyio.run(record)
    assert main(["show", "s", "--state-dir", str(layout.root)]) == 0
    lines = capsys.readouterr().out.split("\n")
    at = {name: next(i for i, line in enumerate(lines) if name in line)
          for name in ("before", "resumed (idle)", "after")}
    assert at["before"] < at["resumed (idle)"] < at["after"]
    assert lines[at["before"] + 1].strip() == f"file: {layout.files_dir('before') / 'shot.png'}"


async def test_the_read_side_writes_its_cursors_without_an_fsync_per_commit(
    recorder: Recorder, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[aiosqlite.Connection] = []
    connect = aiosqlite.connect

    def spy(*args: Any, **kwargs: Any) -> aiosqlite.Connection:
        opened.append(connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(aiosqlite, "connect", spy)
    async with Records.open(db_path), opened[0].execute("PRAGMA synchronous") as cur:
        row = await cur.fetchone()
    assert row is not None and row[0] == 1  # NORMAL, as the writer's connection (FULL is 2)
