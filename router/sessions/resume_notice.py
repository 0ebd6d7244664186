"""Why a session took a new worker up, and the notice its next tool answer carries about it; and
what each tool answer tells the next resume (the page, the refs' frame)."""

from __future__ import annotations

from functools import partial
from typing import Any, Final

from router.record.snapshots import Extracted
from router.record.tabs_and_refs import ref_frame
from router.sessions.page_crash import lost_page
from router.sessions.table import Session, State
from router.sessions.unrestored import BLANK

# Why a session took a new worker up, as the notice, the record and the dashboard name it.
RESUME_REASONS: Final = {
    State.REAPED: "idle",
    State.CRASHED: "crash",
    State.DEGRADED: "crash",
    State.HIBERNATED: "hibernation",
    State.INTERRUPTED: "router-restart",
}
REASON_TEXT: Final = {
    "idle": "a pause longer than the idle timeout",
    "crash": "its browser worker, its browser or its page crashed",
    "hibernation": "it was hibernated to make room",
    "router-restart": "a restart of the router",
    "new-browser": "create_new_session",
    "conversation": "the conversation resumed",
    "session-lost": "the shared browser closed its context (the worker had ended its MCP session)",
}
# A new session that continues a conversation (router/sessions/conversations.py).
CONVERSATION_REASON: Final = "conversation"
LOST_SESSION_REASON: Final = "session-lost"


NOTICE_PREFIX: Final = "[mcp-router] This conversation's browser was restored"
PARTIAL_NOTICE_PREFIX: Final = "[mcp-router] This conversation's browser was only partly restored"


def resumed_notice(reason: str) -> str:
    return (
        f"{NOTICE_PREFIX} after {REASON_TEXT.get(reason, reason)}: "
        "cookies, storage and tabs are back and the page was reloaded, so element refs from before "
        "refer to the reloaded page (they resolve where it is unchanged)."
    )


def partial_notice(reason: str) -> str:
    """A restore that failed or ran out of time: the client must not trust its old refs."""
    return (
        f"{PARTIAL_NOTICE_PREFIX} after {REASON_TEXT.get(reason, reason)}: some cookies, storage or "
        "tabs may be missing and the page may not be the one from before; take a new snapshot "
        "before using element refs from before."
    )


def on_tool_answer(session: Session, result: dict[str, Any], facts: Extracted) -> dict[str, Any]:
    """Called with each tools/call result and its summary: notes the page URL and the refs'
    frame. Returns the result the client gets: ``result`` itself, or, the first answer after a
    resume, a copy with the resume notice added."""
    content = result.get("content")
    if not isinstance(content, list):
        return result
    if _page_lost(session, facts):
        pass  # the crashed page stays the current one: the resume brings it back
    elif facts.page_url is not None:
        session.current_url = facts.page_url
        session.current_title = facts.page_title
    frame = ref_frame(facts.sections.get("Snapshot", ""))
    if frame is None and facts.snapshot_link and facts.linked_snapshot is None:
        # A navigation's refs, in its snapshot file only: read if a save needs them (most
        # navigations are followed by another answer with refs before one does).
        connection = session.connection
        if connection is not None:
            session.ref_frame_file = partial(facts.snapshot_text, connection.worker.output_dir)
    elif frame is None and facts.linked_snapshot is not None:  # read already
        frame = ref_frame(facts.linked_snapshot)
    if frame is not None:
        session.ref_frame, session.ref_frame_file = frame, None
    notice, session.resumed_notice = session.resumed_notice, None
    if notice is None:
        return result
    return {**result, "content": [*content, {"type": "text", "text": notice}]}


def _page_lost(session: Session, facts: Extracted) -> bool:
    """An answer that shows the session's page crashed (``page_crash.lost_page``): its worker is
    marked for ending (``BrowserWatches.called``)."""
    if not (facts.is_error or facts.page_url == BLANK):
        return False  # nearly every answer
    connection = session.connection
    if connection is None or session.current_url in (None, BLANK):
        return False
    if not lost_page(facts, connection.worker.output_dir):
        return False
    session.page_lost_on = connection
    return True


def settled_ref_frame(session: Session) -> int:
    """The frame of the refs the model last saw, reading the snapshot file of a navigation that
    on_tool_answer left unread; a file gone meanwhile (its worker ended) leaves the frame before it."""
    read, session.ref_frame_file = session.ref_frame_file, None
    text = read() if read is not None else None
    frame = ref_frame(text) if text else None
    if frame is not None:
        session.ref_frame = frame
    return session.ref_frame
