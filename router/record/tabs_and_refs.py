"""What an answer shows of the browser's tabs (``### Open tabs``) and of its page's element refs
(their frame prefix: the resume reproduces it, router/sessions/restore.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# "- 1: (current) [Title](url)"; the title may hold brackets, so the URL is the last (...) group.
_REF_RE = re.compile(r"\[ref=(?:f(\d+))?e\d+\]")
_TAB_RE = re.compile(r"^- (\d+): (\(current\) )?\[(.*)\]\(([^()\s]*)\)\s*$", re.MULTILINE)


def ref_frame(text: str) -> int | None:
    """The main frame's ref prefix in a snapshot text ("[ref=f2e3]" -> 2, "[ref=e3]" -> 0);
    None when the text holds no refs."""
    if "[ref=f" not in text:  # no iframe refs (nearly always): spares reading every ref
        return 0 if _REF_RE.search(text) else None
    found = _REF_RE.findall(text)
    return min(int(frame) if frame else 0 for frame in found)  # iframes come after their page


@dataclass(frozen=True)
class Tab:
    index: int
    url: str
    title: str
    current: bool


def tab_entries(text: str) -> list[Tab]:
    """The tabs an answer lists (``- 1: (current) [Title](url)``), by index."""
    tabs = [Tab(int(i), url, title, bool(cur)) for i, cur, title, url in _TAB_RE.findall(text)]
    return sorted(tabs, key=lambda tab: tab.index)


def parse_tabs(text: str) -> list[str]:
    return [tab.url for tab in tab_entries(text)]
