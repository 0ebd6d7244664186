"""The record's text tools: console entries formatted and filtered by level, line diffs of
snapshots, and a search that answers with the matching lines of a snapshot tree (with their
ancestors) or of a diff (with their hunk headers). Pure functions over text."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from router.record.snapshots import LEVELS


def level_rank(level: str | None) -> int:
    """Index in LEVELS; '' / None means everything. Accepts Playwright's 'warning'."""
    if not level:
        return 0
    level = "warn" if level == "warning" else level
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")
    return LEVELS.index(level)


def format_console(entries: Iterable[Mapping[str, Any]], min_level: str | None = None) -> str:
    """One entry per line: ``[error] message @ url:line``, entries below min_level left out."""
    floor = level_rank(min_level)
    lines = []
    for e in entries:
        level = str(e.get("level", "info"))
        if level_rank(level) < floor:
            continue
        text = f"[{level}] {e.get('message', '')}"
        loc = e.get("location")
        if isinstance(loc, Mapping) and loc.get("url") is not None:
            text += f" @ {loc['url']}:{loc.get('line', 0)}"
        lines.append(text)
    return "\n".join(lines)


def line_diff(old: str, new: str, *, context: int = 1) -> str:
    """Unified-style diff without the file header: ``@@`` hunks, ``-``/``+`` lines and a little
    context. Empty when the texts are equal (get_content answers '' for "nothing changed")."""
    if old == new:
        return ""
    diff = difflib.unified_diff(old.split("\n"), new.split("\n"), lineterm="", n=context)
    return "\n".join(line for line in diff if not line.startswith(("---", "+++")))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def search_tree(yaml_text: str, needle: str) -> str:
    """Lines containing ``needle`` (case-insensitive) plus every ancestor line (the nearest line
    above with less indentation, recursively), in document order, so the answer reads as a tree."""
    if not needle:
        return yaml_text
    lines = yaml_text.split("\n")
    low = needle.lower()
    keep: set[int] = set()
    for i, line in enumerate(lines):
        if low not in line.lower():
            continue
        keep.add(i)
        depth = _indent(line)
        for j in range(i - 1, -1, -1):
            if depth == 0:
                break
            if lines[j].strip() and _indent(lines[j]) < depth:
                if j in keep:
                    break  # its ancestors are kept already
                keep.add(j)
                depth = _indent(lines[j])
    return "\n".join(lines[i] for i in sorted(keep))


def search_diff(diff_text: str, needle: str) -> str:
    """search_for applied to a line_diff: matching changed lines, each under its hunk header."""
    if not needle:
        return diff_text
    low = needle.lower()
    out: list[str] = []
    header: str | None = None
    for line in diff_text.split("\n"):
        if line.startswith("@@"):
            header = line
        elif low in line.lower():
            if header is not None:
                out.append(header)
                header = None
            out.append(line)
    return "\n".join(out)
