"""One session as its record tells it: tabs, the current page, its latest snapshots, the calls
that left a screenshot, console entries or a network log. Read only; built per request.

Playwright's answers say which page a call left the browser on (``### Page``) and, when more than
one tab is open or ``browser_tabs`` was called, every tab (``### Open tabs``); an answer without
that section means one tab. Only the newest ``RECENT_ANSWERS`` answers are read whole: a long
conversation's resources cost the same as a short one's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from router.record.files import mime_for
from router.record.snapshots import Extracted, summarize, tool_result
from router.record.tabs_and_refs import Tab, tab_entries

if TYPE_CHECKING:
    from router.record.records import Records

RECENT_ANSWERS: Final = 40
SCREENSHOT_TOOL: Final = "browser_take_screenshot"
CONSOLE_TOOL: Final = "browser_console_messages"
NETWORK_TOOL: Final = "browser_network_requests"


@dataclass(frozen=True)
class Answer:
    """A recorded tool answer read whole."""

    ref_id: str
    tool: str
    ts: float
    page_snapshot: str | None
    facts: Extracted
    tabs: tuple[Tab, ...] | None  # None: the answer did not name the tabs


@dataclass
class SessionView:
    session_id: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # the record's timeline, oldest first
    answers: list[Answer] = field(default_factory=list)  # the newest answers, newest first

    @classmethod
    async def load(cls, records: Records | None, session_id: str) -> SessionView:
        view = cls(session_id)
        if records is None:
            return view
        view.calls = await records.session_calls(session_id)
        recent = [c for c in reversed(view.calls) if c["method"] == "tools/call" and c["status"] == "success"]
        for call in recent[:RECENT_ANSWERS]:
            row = await records.get_call(call["ref_id"], session_id=session_id)
            result = tool_result(row["result"]) or {}
            facts = summarize(result)
            answer = Answer(call["ref_id"], call["tool"] or "", float(call["ts"]), row["page_snapshot"], facts,
                            tabs_of(facts))
            view.answers.append(answer)
        return view

    @property
    def tool_calls(self) -> int:
        return sum(1 for c in self.calls if c["method"] == "tools/call")

    def tabs(self) -> list[Tab]:
        """The tabs as the newest answer that showed a page left them (one tab unless it listed more)."""
        for answer in self.answers:
            if answer.tabs is not None:
                return list(answer.tabs)
        return []

    def current(self) -> Tab | None:
        return next((t for t in self.tabs() if t.current), None)

    def tab(self, index: int) -> Tab | None:
        return next((t for t in self.tabs() if t.index == index), None)

    def last_change(self, tab: Tab) -> Answer | None:
        """The newest answer that left the browser on this tab's page."""
        return next((a for a in self.answers if _current_url(a) == tab.url), None)

    def snapshot(self, tab: Tab) -> Answer | None:
        """The newest answer holding a snapshot of this tab's page."""
        return next((a for a in self.answers if a.page_snapshot and _current_url(a) == tab.url), None)

    def screenshot_refs(self) -> list[str]:
        """Calls that left an image: a screenshot call, or any call whose kept files hold one."""
        return [
            c["ref_id"] for c in self.calls
            if c["status"] == "success"
            and (c["tool"] == SCREENSHOT_TOOL or any(mime_for(n).startswith("image/") for n in c["files"]))
        ]

    def console_refs(self) -> list[str]:
        return [c["ref_id"] for c in self.calls if c["tool"] == CONSOLE_TOOL and c["status"] == "success"]

    def network_logs(self) -> dict[int, Answer]:
        """Per tab, the newest ``browser_network_requests`` answer (it lists the current tab's)."""
        logs: dict[int, Answer] = {}
        for i, answer in enumerate(self.answers):
            if answer.tool != NETWORK_TOOL:
                continue
            # The tab that was current then: the answer itself or the next older one naming tabs.
            named = next((a.tabs for a in self.answers[i:] if a.tabs is not None), None)
            current = next((t.index for t in named or () if t.current), 0)
            logs.setdefault(current, answer)
        return logs

    def owns(self, ref_id: str) -> bool:
        return any(c["ref_id"] == ref_id for c in self.calls)


def tabs_of(facts: Extracted) -> tuple[Tab, ...] | None:
    listed = facts.sections.get("Open tabs")
    if listed is not None and (tabs := tuple(tab_entries(listed))):
        return tabs
    if facts.page_url is not None:
        return (Tab(0, facts.page_url, facts.page_title or "", True),)
    return None


def _current_url(answer: Answer) -> str | None:
    if answer.facts.page_url is not None:
        return answer.facts.page_url
    current = next((t for t in answer.tabs or () if t.current), None)
    return current.url if current is not None else None
