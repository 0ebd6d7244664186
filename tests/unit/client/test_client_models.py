"""The typed client's models read from worker answers as @playwright/mcp 0.0.83 writes them."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from router.client import ConsoleMessages, EvaluateResult, NavigateResult, Screenshot, Snapshot, Tabs


def answer(text: str, *extra: dict[str, Any], ref_id: str = "r1") -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}, *extra], "_meta": {"mcp-router/refId": ref_id}}


def test_a_navigate_answer_gives_the_page_and_its_console_counts() -> None:
    text = (
        "### Ran Playwright code\n```js\nawait page.goto('http://x/');\n```\n### Page\n- Page URL: http://x/\n"
        "- Page Title: Home [beta]\n- Console: 2 errors, 1 warnings\n### Snapshot\n- [Snapshot](out/page.yml)"
    )
    page = NavigateResult.from_result("browser_navigate", answer(text))
    assert (page.url, page.title, page.console_errors, page.console_warnings) == ("http://x/", "Home [beta]", 2, 1)
    assert page.ref_id == "r1" and page.text == text and "Ran Playwright code" in page.sections


def test_snapshot_refs_with_and_without_a_frame_prefix() -> None:
    text = '### Snapshot\n```yaml\n- generic [ref=f1e1]:\n  - textbox "Name" [ref=f1e3]\n  - button "Go" [ref=e7]\n```'
    snap = Snapshot.from_result("browser_snapshot", answer(text))
    assert snap.snapshot.startswith("- generic") and not snap.snapshot.endswith("```")
    assert (snap.ref('textbox "Name"'), snap.ref("Go")) == ("f1e3", "e7")
    with pytest.raises(LookupError, match="Missing"):
        snap.ref("Missing")


def test_screenshot_bytes_are_decoded() -> None:
    image = {"type": "image", "data": base64.b64encode(b"\x89PNG-bytes").decode(), "mimeType": "image/png"}
    shot = Screenshot.from_result("browser_take_screenshot", answer("### Result\n- [Screenshot](a.png)", image))
    assert (shot.data, shot.mime_type) == (b"\x89PNG-bytes", "image/png")


def test_evaluate_values_parse_as_json_or_stay_text() -> None:
    assert EvaluateResult.from_result("browser_evaluate", answer('### Result\n{\n  "a": [1]\n}')).value == {"a": [1]}
    assert EvaluateResult.from_result("browser_evaluate", answer("### Result\nundefined")).value == "undefined"


def test_console_entries_with_levels_and_locations() -> None:
    text = "### Result\nTotal messages: 2 (Errors: 1, Warnings: 1)\n\n[ERROR] boom @ http://x/:3\n[WARNING] careful"
    entries = ConsoleMessages.from_result("browser_console_messages", answer(text)).entries
    assert [(e.level, e.message, e.url, e.line) for e in entries] == [
        ("error", "boom", "http://x/", 3),
        ("warn", "careful", None, None),
    ]


def test_tabs_with_titles_and_the_current_one() -> None:
    text = "### Result\n- 0: [Home [1]](http://x/)\n- 1: (current) [Second](http://x/second)"
    tabs = Tabs.from_result("browser_tabs", answer(text))
    assert [(t.index, t.title, t.url, t.current) for t in tabs.tabs] == [
        (0, "Home [1]", "http://x/", False),
        (1, "Second", "http://x/second", True),
    ]
    assert tabs.current is not None and tabs.current.index == 1
