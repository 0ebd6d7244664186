"""Log lines: a client-chosen string with a newline or an escape sequence cannot forge a line."""

from __future__ import annotations

import json
import logging

import pytest

from router.operator.logs import JsonFormatter, TextFormatter, configure_logging

HOSTILE_TOOL = "echo\n2026-11-23 08:00:00,000 WARNING mcp_router.auth: token accepted\r\x1b[2J\u2028"


def _record(*, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    record = logging.LogRecord(
        "mcp_router.calls", logging.INFO, __file__, 1, "call session=%s tool=%s", ("s1", HOSTILE_TOOL), exc_info
    )
    record.__dict__["tool"] = HOSTILE_TOOL
    return record


def test_text_lines_escape_control_characters() -> None:
    line = TextFormatter().format(_record())
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\u2028" not in line
    assert "tool=echo\\n2026-11-23" in line and "\\x1b[2J" in line


def test_a_traceback_still_spans_lines_after_an_escaped_message() -> None:
    text = TextFormatter().format(_record(exc=True))
    first, *rest = text.split("\n")
    assert "tool=echo\\n" in first
    assert rest and rest[-1] == "ValueError: boom"


def test_json_values_stay_on_one_line_once_decoded() -> None:
    line = JsonFormatter().format(_record())
    assert "\n" not in line
    entry = json.loads(line)
    for key in ("msg", "tool"):
        assert "\n" not in entry[key] and "\r" not in entry[key] and "\x1b" not in entry[key], key
    assert entry["tool"].startswith("echo\\n2026")


@pytest.mark.parametrize(("fmt", "kind"), [("text", TextFormatter), ("json", JsonFormatter)])
def test_configure_logging_uses_the_escaping_formatters(
    fmt: str, kind: type[logging.Formatter], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    try:
        configure_logging("info", fmt)
        assert isinstance(root.handlers[0].formatter, kind)
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
