"""The refs' frame a resume reproduces: an inline snapshot gives it at once; a navigation's, whose
refs are only in its snapshot file, is read when a save needs it, not with every navigation."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from router.record.snapshots import summarize
from router.sessions.resume_notice import on_tool_answer, settled_ref_frame
from router.sessions.table import Session


def _result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def _session(output_dir: Path) -> Session:
    session = Session("s" * 20)
    session.connection = SimpleNamespace(worker=SimpleNamespace(output_dir=output_dir))  # type: ignore[assignment]
    return session


def _noted(session: Session, text: str) -> None:
    result = _result(text)
    on_tool_answer(session, result, summarize(result))


def _navigation(path: Path) -> str:
    return f"### Page state\n- Page URL: http://127.0.0.1/a\n### Snapshot\n- [Snapshot]({path})"


def test_an_inline_snapshot_gives_the_frame_at_once(tmp_path: Path) -> None:
    session = _session(tmp_path)
    _noted(session, '### Snapshot\n```yaml\n- button "Go" [ref=f2e3]\n```')
    assert session.ref_frame == 2
    assert session.ref_frame_file is None


def test_a_navigations_snapshot_file_is_read_when_a_save_needs_it(tmp_path: Path) -> None:
    session = _session(tmp_path)
    snapshot = tmp_path / "page-1.yml"
    _noted(session, _navigation(snapshot))  # the file is not there yet: nothing was read
    assert session.ref_frame == 0
    snapshot.write_text('- button "Again" [ref=f1e2]\n')
    assert settled_ref_frame(session) == 1
    assert session.ref_frame_file is None
    snapshot.write_text('- button "Again" [ref=f5e2]\n')
    assert settled_ref_frame(session) == 1, "read once"


def test_a_later_inline_snapshot_wins_over_an_unread_file(tmp_path: Path) -> None:
    session = _session(tmp_path)
    snapshot = tmp_path / "page-1.yml"
    snapshot.write_text('- button "Again" [ref=f1e2]\n')
    _noted(session, _navigation(snapshot))
    _noted(session, '### Snapshot\n```yaml\n- button "Go" [ref=f3e3]\n```')
    assert settled_ref_frame(session) == 3


def test_a_file_gone_before_the_save_leaves_the_frame_before_it(tmp_path: Path) -> None:
    session = _session(tmp_path)
    _noted(session, '### Snapshot\n```yaml\n- button "Go" [ref=f2e3]\n```')
    _noted(session, _navigation(tmp_path / "page-gone.yml"))
    assert settled_ref_frame(session) == 2


def test_a_link_outside_the_workers_output_dir_is_never_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere.yml"
    elsewhere.write_text('- button "Again" [ref=f4e2]\n')
    session = _session(out)
    _noted(session, _navigation(elsewhere))
    assert settled_ref_frame(session) == 0
