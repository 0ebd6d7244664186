from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from router.record.snapshots import READ_NOW_MAX, compact_summary, extract, normalize_console, summarize
from router.record.text_views import format_console, line_diff, search_diff, search_tree
from tests.support.recorded import Answers, load_answers


def _text_answer(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def test_navigate_reads_linked_snapshot_and_console_lines(answers: Answers) -> None:
    ex = extract(answers.result("navigate"), answers.output_dir)
    assert ex.page_snapshot == answers.file("page-", 0)
    assert ex.page_snapshot is not None and ex.page_snapshot.startswith("- generic [active] [ref=e1]:")
    assert ex.page_url == "http://127.0.0.1:8765/index.html"
    assert ex.page_title == "Hi"
    assert (ex.console_errors, ex.console_warnings) == (1, 0)
    assert not ex.has_image and not ex.is_error
    # "#L1-L3" of a 5-line log: exactly the first three lines, raw.
    assert ex.console_lines == answers.file("console-").split("\n")[:3]
    assert [e["level"] for e in normalize_console(ex.console_lines)] == ["error", "info", "info"]


def test_click_single_line_console_link(answers: Answers) -> None:
    ex = extract(answers.result("click"), answers.output_dir)
    assert ex.page_snapshot == answers.file("page-", 1)
    assert "Clicked 1" in ex.page_snapshot
    assert len(ex.console_lines) == 1 and "[WARNING] clicked warn" in ex.console_lines[0]
    assert (ex.console_errors, ex.console_warnings) == (1, 1)


def test_inline_snapshot_of_browser_snapshot(answers: Answers) -> None:
    ex = summarize(answers.result("snapshot"))  # no disk needed
    assert ex.page_snapshot == answers.file("page-", 0)  # same page, same YAML as the linked file
    assert ex.snapshot_link is None


def test_summarize_does_not_read_files_but_keeps_the_link(answers: Answers) -> None:
    ex = summarize(answers.result("navigate"))
    assert ex.page_snapshot is None
    first_page = sorted(answers.output_dir.glob("page-*.yml"))[0]
    assert ex.snapshot_link == str(first_page)


def test_console_messages_inline(answers: Answers) -> None:
    ex = summarize(answers.result("console"))
    entries = normalize_console(ex.console_lines)
    assert [e["level"] for e in entries] == ["error", "info", "info", "debug", "warn", "warn"]
    assert entries[0] == {
        "level": "error", "message": "boom from page",
        "location": {"url": "http://127.0.0.1:8765/index.html", "line": 5},
    }
    default = summarize(answers.result("console_default"))
    assert len(default.console_lines) == 5  # after the "Returning 5 messages" line


def test_error_and_image_answers(answers: Answers) -> None:
    bad = extract(answers.result("click_bad"), answers.output_dir)
    assert bad.is_error and bad.page_snapshot is None
    assert "Ref e999 not found" in bad.sections["Error"]
    shot = extract(answers.result("screenshot"), answers.output_dir)
    assert shot.has_image and shot.page_snapshot is None


def test_for_record_reads_a_linked_snapshot_and_console_now(answers: Answers) -> None:
    # What the writer thread would read onto the row later, read at once: the same text.
    navigate = answers.result("navigate")
    later = extract(navigate, answers.output_dir)
    now = summarize(navigate).for_record(answers.output_dir)
    assert now == (later.page_snapshot, later.console_lines)
    assert now[0] is not None and now[0].startswith("- generic [active]") and len(now[1]) == 3
    assert summarize(navigate).for_record(None) is None  # nowhere to read from: later
    inline = summarize(answers.result("snapshot"))
    assert inline.for_record(None) == (inline.page_snapshot, [])  # all in the text


def test_for_record_leaves_images_big_files_and_kept_files_to_the_writer(answers: Answers) -> None:
    assert summarize(answers.result("screenshot")).for_record(answers.output_dir) is None
    out = answers.output_dir
    (out / "big.yml").write_text("- x\n" * (READ_NOW_MAX // 4 + 1))
    big = _text_answer(f"### Snapshot\n- [Snapshot]({out}/big.yml)")
    assert summarize(big).for_record(out) is None
    assert extract(big, out).page_snapshot == (out / "big.yml").read_text()  # the thread reads it whole
    (out / "report.pdf").write_bytes(b"%PDF-")
    kept = _text_answer(f"### Result\n- [Page as pdf]({out}/report.pdf)\n### Snapshot\n- [Snapshot]({out}/big.yml)")
    assert summarize(kept).for_record(out) is None  # the record keeps the pdf: the thread copies it
    gone = summarize(_text_answer("### Snapshot\n- [Snapshot](page-gone.yml)"))
    assert gone.for_record(out) == (None, [])  # as extract: a missing file is no error


def test_a_snapshots_text_is_inline_or_read_once_from_its_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "page.yml").write_text('- button "Go" [ref=f1e2]\n')
    linked = summarize(_text_answer(f"### Snapshot\n- [Snapshot]({out}/page.yml)"))
    assert linked.snapshot_text(out) == '- button "Go" [ref=f1e2]\n'
    assert linked.snapshot_text(None) is None  # nowhere to read it from
    read = dataclasses.replace(linked, linked_snapshot="as read for the record")
    (out / "page.yml").unlink()
    assert read.snapshot_text(out) == "as read for the record"  # not read again
    (out / "big.yml").write_text("- x\n" * (READ_NOW_MAX // 4 + 1))
    assert summarize(_text_answer(f"### Snapshot\n- [Snapshot]({out}/big.yml)")).snapshot_text(out) is None
    inline = summarize(_text_answer('### Snapshot\n```yaml\n- button "Go" [ref=e2]\n```'))
    assert inline.snapshot_text(None) == inline.page_snapshot is not None


def test_relative_links_resolve_against_output_dir_parent_or_cwd(tmp_path: Path) -> None:
    rel = load_answers("rel", tmp_path / "cwd")
    navigate = rel.result("navigate")
    assert "](out/page-" in navigate["content"][0]["text"]
    ex = extract(navigate, rel.output_dir)
    assert ex.page_snapshot == rel.file("page-", 0)
    assert len(ex.console_lines) == 4
    # A worker cwd elsewhere: given explicitly, it is tried first.
    other = tmp_path / "elsewhere" / "out"
    other.mkdir(parents=True)
    os.replace(rel.output_dir, other)
    expected = sorted(other.glob("page-*"))[0].read_text()
    assert extract(navigate, other, cwd=other.parent).page_snapshot == expected


@pytest.mark.parametrize("link", [
    "../secret.yml", "/etc/passwd", "out/../../secret.yml", "%s/../secret.yml", "link-out.yml",
    "%s/link-out.yml", "%s/..",
])
def test_links_outside_the_output_dir_are_not_read(tmp_path: Path, link: str) -> None:
    out = tmp_path / "w" / "out"
    out.mkdir(parents=True)
    secret = tmp_path / "w" / "secret.yml"
    secret.write_text("- secret")
    (out / "link-out.yml").symlink_to(secret)  # a symlink inside pointing outside
    link = link % out if "%s" in link else link
    answer = _text_answer(
        f"### Snapshot\n- [Snapshot]({link})\n### Events\n- New console entries: {link}#L1"
    )
    ex = extract(answer, out, cwd=out.parent)
    assert ex.page_snapshot is None
    assert ex.console_lines == []


def test_missing_file_is_not_an_error(tmp_path: Path) -> None:
    ex = extract(_text_answer("### Snapshot\n- [Snapshot](page-gone.yml)"), tmp_path)
    assert ex.page_snapshot is None and ex.snapshot_link == "page-gone.yml"


def test_sections_inside_code_fences_are_not_headings() -> None:
    text = "### Result\n```\n### not a heading\n```\n### Page\n- Page URL: http://x/\n- Page Title: T"
    ex = summarize(_text_answer(text))
    assert "### not a heading" in ex.sections["Result"]
    assert ex.page_url == "http://x/" and ex.page_title == "T"


def test_normalize_console_multiline_and_page_errors() -> None:
    lines = [
        "[      10ms] [LOG] first line",
        "second line @ http://h/a.js:3",
        "[      12ms] Error: uncaught",
        "    at f (http://h/a.js:9:1)",
        "[      13ms] [TRACE] t @ :0",
        "[      14ms] [ASSERT] a @ http://h/:1",
    ]
    entries = normalize_console(lines)
    assert entries[0] == {"level": "info", "message": "first line\nsecond line",
                          "location": {"url": "http://h/a.js", "line": 3}}
    assert entries[1]["level"] == "error" and entries[1]["message"].startswith("Error: uncaught\n    at f")
    assert [e["level"] for e in entries[2:]] == ["debug", "error"]
    assert entries[2]["location"] == {"url": "", "line": 0}


def test_format_console_filters_by_min_level() -> None:
    entries = normalize_console(["[DEBUG] d @ u:1", "[LOG] l @ u:2", "[WARNING] w @ u:3", "[ERROR] e @ u:4"])
    assert format_console(entries, "warn") == "[warn] w @ u:3\n[error] e @ u:4"
    assert format_console(entries, "warning") == format_console(entries, "warn")
    assert len(format_console(entries, "").split("\n")) == 4
    assert format_console(entries, None) == format_console(entries, "debug")
    with pytest.raises(ValueError):
        format_console(entries, "loud")


def test_line_diff(answers: Answers) -> None:
    before, after = answers.file("page-", 0), answers.file("page-", 1)
    assert line_diff(before, before) == ""
    diff = line_diff(before, after)
    assert "-  - paragraph [ref=e4]: Not clicked" in diff.split("\n")
    assert "+  - paragraph [ref=e4]: Clicked 1" in diff.split("\n")
    assert diff.startswith("@@")
    assert "Alpha" not in diff and "---" not in diff  # only a little context, no file header
    assert search_diff(diff, "clicked") == "\n".join(
        [diff.split("\n")[0]] + [line for line in diff.split("\n") if "licked" in line]
    )


def test_search_tree_keeps_ancestors(answers: Answers) -> None:
    tree = answers.file("page-", 0)
    assert search_tree(tree, "LINK").split("\n") == [
        "- generic [active] [ref=e1]:",
        "  - list [ref=e5]:",
        "    - listitem [ref=e7]:",
        '      - link "link" [ref=e8] [cursor=pointer]:',
    ]
    assert search_tree(tree, "alpha").split("\n") == [
        "- generic [active] [ref=e1]:", "  - list [ref=e5]:", "    - listitem [ref=e6]: Alpha",
    ]
    assert search_tree(tree, "nothing-like-this") == ""
    assert search_tree(tree, "") == tree


def test_compact_summary(answers: Answers) -> None:
    ex = summarize(answers.result("click"))
    text = compact_summary("ref-1", "browser_click", ex)
    assert "ref_id: ref-1" in text and "tool: browser_click" in text
    assert "page: http://127.0.0.1:8765/index.html" in text and "title: Hi" in text
    assert "snapshot available: yes" in text
    assert "console: 1 errors, 1 warnings" in text
    assert text.endswith('Call get_content(ref_id="ref-1") to read the page snapshot.')
    assert len(text) < len(answers.result("click")["content"][0]["text"]) + 200
    tabs = compact_summary("ref-2", "browser_tabs", summarize(answers.result("tabs")))
    assert "snapshot available: no" in tabs and "get_content" not in tabs
