from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from router.layout import StateLayout
from router.record import files
from router.record.recorder import BATCH_MAX, Recorder
from tests.support.recorded import Answers, query


def _count(db: Path, table: str) -> int:
    return int(query(db, f"SELECT count(*) FROM {table}")[0][0])


def _call(rec: Recorder, session_id: str, ref_id: str | None = None, **response: Any) -> str:
    ref_id = ref_id or str(uuid.uuid4())
    rec.request(ref_id, session_id, "tools/call", "browser_snapshot", {"name": "browser_snapshot"})
    rec.response(ref_id, status="success", result='{"content":[]}', duration_ms=1.5, **response)
    return ref_id


async def test_rows_of_every_kind_are_written(recorder: Recorder, db_path: Path, answers: Answers) -> None:
    recorder.session_opened("s1", client_info={"name": "claude-code", "version": "2.1"},
                            protocol_version="2025-06-18", port=21234, pid=4242, metadata={"mode": "compact"})
    recorder.request("r1", "s1", "tools/call", "browser_navigate", {"name": "browser_navigate"})
    raw = json.dumps(answers.result("navigate"))
    recorder.response("r1", status="success", result=raw, duration_ms=512.0, output_dir=answers.output_dir)
    recorder.session_state("s1", "closed")
    await recorder.flush()
    (session,) = query(db_path, "SELECT state, client_info, worker_port, worker_pid, metadata FROM sessions")
    assert session[0] == "closed" and json.loads(session[1])["name"] == "claude-code"
    assert session[2:4] == (21234, 4242) and json.loads(session[4]) == {"mode": "compact"}
    (resp,) = query(db_path, "SELECT status, result, page_snapshot, console_logs FROM responses")
    assert resp[0] == "success" and resp[1] == raw  # verbatim
    assert resp[2] == answers.file("page-", 0)
    assert json.loads(resp[3]) == answers.file("console-").split("\n")[:3]
    levels = query(db_path, "SELECT level, message, location FROM console_logs ORDER BY id")
    assert [r[0] for r in levels] == ["error", "info", "info"]
    assert json.loads(levels[0][2]) == {"url": "http://127.0.0.1:8765/index.html", "line": 5}


async def test_parsed_result_and_whole_jsonrpc_message_are_accepted(
    recorder: Recorder, db_path: Path, answers: Answers
) -> None:
    recorder.request("a", "s", "tools/call", "browser_click", {})
    recorder.response("a", status="success", result=answers.result("click"), duration_ms=1,
                      output_dir=answers.output_dir)
    recorder.request("b", "s", "tools/call", "browser_click", {})
    recorder.response("b", status="success", result=json.dumps(answers.by_name["click"]).encode(),
                      duration_ms=1, output_dir=answers.output_dir)
    await recorder.flush()
    rows = dict(query(db_path, "SELECT ref_id, page_snapshot FROM responses"))
    assert rows["a"] == rows["b"] == answers.file("page-", 1)
    assert json.loads(query(db_path, "SELECT result FROM responses WHERE ref_id='a'")[0][0]) == \
        answers.result("click")


async def test_enqueue_is_batched(recorder: Recorder, db_path: Path) -> None:
    # No await between enqueues: the writer finds them all queued and groups them.
    for i in range(1000):
        _call(recorder, "s", f"ref-{i}")
    await recorder.flush()
    assert _count(db_path, "requests") == _count(db_path, "responses") == 1000
    assert recorder.stats().batches <= -(-2000 // BATCH_MAX)
    assert recorder.stats().written == 2000 and recorder.stats().failed_rows == 0 and recorder.stats().dropped == 0


async def test_flush_waits_only_for_what_was_enqueued(recorder: Recorder, db_path: Path) -> None:
    await recorder.flush()  # nothing queued: returns at once
    ref = _call(recorder, "s")
    await recorder.flush()
    assert query(db_path, "SELECT ref_id FROM responses") == [(ref,)]


async def test_concurrent_sessions(db_path: Path) -> None:
    rec = Recorder(db_path, queue_max=100_000)
    sessions, per_session = 8, 500

    async def traffic(session_id: str) -> None:
        rec.session_opened(session_id, client_info=None, protocol_version=None, port=None, pid=None)
        for i in range(per_session):
            _call(rec, session_id, f"{session_id}-{i}", console_logs=["[ERROR] x @ u:1"])
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the other sessions and the writer interleave

    async with rec.run():
        await asyncio.gather(*(traffic(f"s{n}") for n in range(sessions)))
        await rec.flush()
        calls = await rec.records.list_sessions() if rec.records else []
    total = sessions * per_session
    for table in ("requests", "responses", "console_logs"):
        assert _count(db_path, table) == total
    assert sorted(c["calls"] for c in calls) == [per_session] * sessions
    assert rec.stats().dropped == 0 and rec.stats().failed_rows == 0


async def test_full_queue_drops_and_counts(db_path: Path) -> None:
    rec = Recorder(db_path, queue_max=10)
    for i in range(15):  # the writer is not running yet: nothing drains
        rec.request(f"r{i}", "s", "ping", None, None)
    assert rec.stats().dropped == 5 and rec.stats().queue_len == 10
    async with rec.run():
        await rec.flush()
    assert _count(db_path, "requests") == 10
    (failure,) = query(db_path, "SELECT what, error FROM recorder_failures")
    assert failure[0] == "queue full" and "5 item(s) dropped" in failure[1]


async def test_write_failure_never_raises_and_is_recorded_later(recorder: Recorder, db_path: Path) -> None:
    # query_only makes every write fail like a read-only or full disk would (root ignores chmod).
    await recorder.call_in_writer(lambda c: c.execute("PRAGMA query_only = ON"))
    ref = _call(recorder, "s")
    await recorder.flush()
    assert recorder.stats().failed_rows == 2
    assert _count(db_path, "responses") == 0
    await recorder.call_in_writer(lambda c: c.execute("PRAGMA query_only = OFF"))
    later = _call(recorder, "s")
    await recorder.flush()
    assert [r[0] for r in query(db_path, "SELECT ref_id FROM responses")] == [later]
    (failure,) = query(db_path, "SELECT what, error FROM recorder_failures")
    assert failure[0] == "batch of 2" and "readonly" in failure[1]
    assert ref not in failure[1]


async def test_broken_connection_is_survived(db_path: Path) -> None:
    rec = Recorder(db_path)
    async with rec.run():
        await rec.call_in_writer(lambda c: c.close())
        _call(rec, "s")
        rec.session_state("s", "closed")
        await rec.flush()  # returns although nothing could be written
        assert rec.stats().failed_rows == 3 and rec.stats().written == 0


async def test_one_bad_row_does_not_cost_the_batch(recorder: Recorder, db_path: Path) -> None:
    _call(recorder, "s", "dup")
    recorder.request("dup", "s", "tools/call", "x", {})  # duplicate ref_id: IntegrityError
    recorder.response("odd", status="maybe", result=None, duration_ms=0)  # violates the CHECK
    good = _call(recorder, "s")
    await recorder.flush()
    assert recorder.stats().failed_rows == 2
    assert {r[0] for r in query(db_path, "SELECT ref_id FROM responses")} == {"dup", good}
    whats = sorted(r[0] for r in query(db_path, "SELECT what FROM recorder_failures"))
    assert whats == ["request dup", "response odd"]


async def test_unserialisable_params_do_not_break_recording(recorder: Recorder, db_path: Path) -> None:
    recorder.request("r", "s", "tools/call", "t", {"when": object()})
    await recorder.flush()
    assert _count(db_path, "requests") == 1


async def test_startup_marks_live_sessions_interrupted(db_path: Path) -> None:
    rec = Recorder(db_path)
    async with rec.run():
        for sid in ("live", "sick", "done"):
            rec.session_opened(sid, client_info=None, protocol_version=None, port=1, pid=2, metadata={"k": 1})
        rec.session_state("sick", "degraded")
        rec.session_state("done", "closed")
        _call(rec, "live", "kept")
    # A new run on the same file, as after a crash (the first run never closed "live").
    async with Recorder(db_path).run() as rec2:
        assert rec2.records is not None
        states = {s["id"]: s["state"] for s in await rec2.records.list_sessions()}
        live = await rec2.records.get_session("live")
        assert (await rec2.records.get_call("kept"))["status"] == "success"  # history stays queryable
    assert states == {"live": "interrupted", "sick": "interrupted", "done": "closed"}
    assert live["metadata"] == {"k": 1, "interrupted_from": "active"}


async def test_retention_prunes_old_rows_but_not_live_sessions(db_path: Path) -> None:
    rec = Recorder(db_path, retention_days=30)
    async with rec.run():
        rec.session_opened("old", client_info=None, protocol_version=None, port=1, pid=2)
        rec.session_opened("live", client_info=None, protocol_version=None, port=3, pid=4)
        _call(rec, "old", console_logs=["[LOG] hi"])
        _call(rec, "live")
        rec.session_state("old", "reaped")
        await rec.flush()
        assert await rec.prune() == []  # nothing is 30 days old yet
        assert _count(db_path, "responses") == 2
        pruned = await rec.prune(now=time.time() + 31 * 86400)
        assert pruned == ["old"]
        for table in ("requests", "responses", "console_logs"):
            assert _count(db_path, table) == 0
        assert [r[0] for r in query(db_path, "SELECT id FROM sessions")] == ["live"]


async def test_enqueued_before_run_is_written_and_after_run_is_kept_off_disk(db_path: Path) -> None:
    rec = Recorder(db_path)
    _call(rec, "s", "early")
    async with rec.run():
        await rec.flush()
        assert query(db_path, "SELECT ref_id FROM responses") == [("early",)]
    _call(rec, "s", "late")  # must not raise once stopped
    await rec.flush()
    assert query(db_path, "SELECT ref_id FROM responses") == [("early",)]


async def test_cancelled_lifespan_still_drains_the_queue(db_path: Path) -> None:
    rec = Recorder(db_path)
    with anyio.CancelScope() as scope:
        async with rec.run():
            for i in range(100):
                _call(rec, "s", f"c{i}")
            scope.cancel()  # no await since the enqueues: the writer has not seen them yet
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert _count(db_path, "responses") == 100


def _shot_result(out: Path) -> dict[str, Any]:
    text = "\n".join([
        "### Result", f"- [Screenshot of viewport]({out}/shot.png)", "- [Page as pdf](page.pdf)",
        f"- [Storage state]({out}/storage-state.json)", "- [Hidden](.router-storage-save.json)",
        "- [Big](big.bin)", "- [Outside](../secret.png)",
        "### Snapshot", f"- [Snapshot]({out}/page-1.yml)",
    ])
    return {"content": [{"type": "text", "text": text}]}


async def test_linked_files_are_kept_with_their_row_and_pruned_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = StateLayout(tmp_path / "state")
    out = tmp_path / "worker" / "out"
    out.mkdir(parents=True)
    (out / "shot.png").write_bytes(b"\x89PNG shot")
    (out / "page.pdf").write_bytes(b"%PDF pdf")
    (out / "page-1.yml").write_text("- button [ref=e1]")
    (out / "storage-state.json").write_text('{"cookies": ["secret"]}')
    (out / ".router-storage-save.json").write_text('{"cookies": ["secret"]}')
    (out / "big.bin").write_bytes(b"x" * 65)
    (tmp_path / "worker" / "secret.png").write_bytes(b"outside")
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 64)
    rec = Recorder(layout.db, layout=layout, retention_days=30)
    async with rec.run():
        rec.request("shot", "s", "tools/call", "browser_take_screenshot", {})
        rec.response("shot", status="success", result=_shot_result(out), duration_ms=1, output_dir=out)
        await rec.flush()
        shutil.rmtree(out)  # the session went dormant
        kept = layout.files_dir("shot")
        assert sorted(p.name for p in kept.iterdir()) == ["page.pdf", "shot.png"]
        assert (kept / "shot.png").read_bytes() == b"\x89PNG shot"
        assert {p.stat().st_mode & 0o777 for p in kept.iterdir()} == {0o600}
        assert rec.records is not None
        call = await rec.records.get_call("shot")
        assert [(f["name"], f["title"], f["mime"]) for f in call["files"]] == [
            ("shot.png", "Screenshot of viewport", "image/png"), ("page.pdf", "Page as pdf", "application/pdf"),
        ]
        assert call["page_snapshot"] == "- button [ref=e1]"
        assert await rec.prune() == []
        assert kept.is_dir()
        await rec.prune(now=time.time() + 31 * 86400)
        assert not kept.exists()
        assert _count(layout.db, "call_files") == 0


async def test_without_a_layout_no_files_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "shot.png").write_bytes(b"\x89PNG shot")
    rec = Recorder(tmp_path / "router.db")
    async with rec.run():
        rec.request("shot", "s", "tools/call", "browser_take_screenshot", {})
        rec.response("shot", status="success", result=_shot_result(out), duration_ms=1, output_dir=out)
        await rec.flush()
    assert _count(tmp_path / "router.db", "call_files") == 0 and not (tmp_path / "files").exists()


async def test_resume_reasons_are_session_events(recorder: Recorder, db_path: Path) -> None:
    recorder.session_opened("s", client_info=None, protocol_version=None, port=1, pid=2)
    for reason in ("idle", "crash", "router-restart"):
        recorder.session_resumed("s", reason)
    assert recorder.records is not None
    events = await recorder.records.session_events("s")
    assert [(e["kind"], e["detail"]) for e in events] == [
        ("resumed", "idle"), ("resumed", "crash"), ("resumed", "router-restart"),
    ]
    assert (await recorder.records.list_sessions())[0]["last_resume"] == "router-restart"
    lines = [json.loads(line) async for line in recorder.records.export_session("s")]
    assert [e["detail"] for e in lines[0]["events"]] == ["idle", "crash", "router-restart"]
