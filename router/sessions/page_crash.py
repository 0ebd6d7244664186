"""A page that crashed under a live worker (its renderer died: out of memory, a Chromium bug, a
kill): how the router tells, and the saved tabs with that page put back.

Playwright MCP marks the tab crashed and, at the next call of any MCP session on the worker that
needs a tab, closes it, opens ``about:blank`` in its place and logs ``CRASH_RESET`` to that
session's console entries (a call that reached the page before Playwright knew fails with
``TARGET_CRASHED``). Only the session whose call found it is told; every other session
sharing the browser (the client's, when the router's own session found it first) just sees the
blank page, and a save taken then would keep the blank tab for the next resume. So every answer
the router reads of the worker is looked at: the client's (``resume_notice.on_tool_answer``) and
the router's own (``browser_watch``, ``state_save``). The worker is then ended as a crash, its
state saved with the page put back, and the next call resumes the session on it
(``BrowserWatches.page_crashed``), as after a browser that died. A client's call that met the
crash ran on no page of the client's: it is not answered from there but sent once more, to the
worker resumed with the page (``http/worker_faults.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Final

from router.record.snapshots import Extracted, summarize, with_linked
from router.sessions.table import Session, State
from router.sessions.unrestored import BLANK

if TYPE_CHECKING:
    from router.sessions.continuity import Continuity

__all__ = [
    "CRASH_RESET", "TARGET_CRASHED", "answer_reports_crash", "end_for_lost_page", "lost_page", "put_back",
]

log = logging.getLogger("mcp_router.continuity")

CRASH_RESET: Final = "Page crashed and was reset to about:blank."
# Playwright's error for a call that reached the page before the crash was known to it.
TARGET_CRASHED: Final = "Target crashed"
# The console entries of the call that found the crash: a few lines (the message, its stack).
READ_MAX: Final = 64 * 1024


def lost_page(facts: Extracted, output_dir: Path) -> bool:
    """Whether a tool answer shows that the page it was meant for crashed: Playwright's error for
    a call on it, or the blank tab put in its place (its console entries say why)."""
    if facts.is_error and TARGET_CRASHED in facts.sections.get("Error", ""):
        return True
    return facts.page_url == BLANK and _reports_crash(facts, output_dir)


def _reports_crash(facts: Extracted, output_dir: Path) -> bool:
    """Whether an answer's new console entries (inline, or in the linked file, read only inside
    ``output_dir``) hold Playwright's crash reset."""
    if "Events" not in facts.sections and not facts.console_lines:
        return False  # most answers: nothing to read
    read = with_linked(facts, output_dir, limit=READ_MAX)
    lines = read.console_lines if read is not None else facts.console_lines
    return any(CRASH_RESET in line for line in lines)


def answer_reports_crash(text: str, output_dir: Path) -> bool:
    """``_reports_crash`` for the text of an answer to one of the router's own calls."""
    if "Events" not in text:
        return False
    return _reports_crash(summarize({"content": [{"type": "text", "text": text}]}), output_dir)


def put_back(tabs: list[str], lost: str) -> list[str]:
    """The tabs with the crashed page in the place of the blank tab Playwright opened for it
    (opened last); added at the end when there is neither that nor the page."""
    for i in range(len(tabs) - 1, -1, -1):
        if tabs[i] == BLANK:
            return [*tabs[:i], lost, *tabs[i + 1 :]]
    return [*tabs, lost] if lost not in tabs else tabs


async def end_for_lost_page(continuity: Continuity, session: Session) -> None:
    """Ends the worker whose browser lost the session's page (``Session.page_lost_on``) as a
    crash: its state saved with the page put back (``state_save``), so the next call resumes the
    session on it, with the resume notice. Whoever comes second (the watch's task, or a call
    that arrived first: ``RequestServing.ensure_worker``) finds it done."""
    connection = session.connection
    if connection is None or session.page_lost_on is not connection:
        return
    log.warning(
        "page crashed under a live worker session=%s pid=%d url=%s; restarting the worker",
        session.id, connection.worker.pid, session.current_url,
    )  # fmt: skip
    try:
        if await continuity.go_dormant(session, State.CRASHED, force=True):
            session.crashed(page_only=True)
            if continuity.metrics is not None:
                continuity.metrics.crashed()
    finally:
        if session.page_lost_on is connection:
            session.page_lost_on = None
