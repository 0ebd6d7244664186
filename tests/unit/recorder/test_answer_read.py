"""An answer's row written from what the proxy read of its text once it had left
(``Recorder.answer_read``), not parsed and read a second time by the writer; too late, and the
writer reads it itself as before."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from router.record.recorder import Recorder
from router.record.snapshots import summarize
from tests.support.recorded import Answers, query


def _answer(recorder: Recorder, answers: Answers, ref_id: str) -> int:
    recorder.request(ref_id, "s", "tools/call", "browser_navigate", {"name": "browser_navigate"})
    return recorder.response(
        ref_id, status="success", result=json.dumps(answers.result("navigate")), duration_ms=1.0,
        output_dir=answers.output_dir,
    )


def _snapshot(db: Path, ref_id: str) -> str:
    return str(query(db, "SELECT page_snapshot FROM responses WHERE ref_id = ?", (ref_id,))[0][0])


async def test_a_row_is_written_from_the_read_handed_over_while_it_is_queued(
    recorder: Recorder, db_path: Path, answers: Answers
) -> None:
    seq = _answer(recorder, answers, "handed")
    assert seq > 0
    read = summarize(answers.result("navigate"))
    # Told apart from the writer's own reading: the snapshot as the proxy "read" it.
    recorder.answer_read(seq, dataclasses.replace(read, page_snapshot="- read by the proxy", links_files=False))
    unread = _answer(recorder, answers, "unread")
    await recorder.flush()
    assert _snapshot(db_path, "handed") == "- read by the proxy"
    assert _snapshot(db_path, "unread") == answers.file("page-", 0)  # the writer read the linked file
    assert unread == seq + 2  # its request between


async def test_a_read_handed_over_after_the_row_was_taken_is_dropped(
    recorder: Recorder, db_path: Path, answers: Answers
) -> None:
    seq = _answer(recorder, answers, "late")
    await recorder.flush()
    recorder.answer_read(seq, summarize({"content": [{"type": "text", "text": "### Snapshot\n```yaml\n- x\n```"}]}))
    _answer(recorder, answers, "next")
    await recorder.flush()
    assert _snapshot(db_path, "late") == _snapshot(db_path, "next") == answers.file("page-", 0)
