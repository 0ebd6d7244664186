"""A picture of a live session's page for the dashboard, taken when the operator opens the session.

Through the router's control session, which shares the client's browser context: never the
client's own MCP session (its current tab and its record stay untouched) and never on a client
call's path. The control session selects the tab showing the client's page and takes a JPEG of
the viewport; the file Playwright writes beside the answer is deleted at once: nothing is kept.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
from typing import Final

import anyio

from router.record.snapshots import file_links, resolve_inside
from router.record.tabs_and_refs import Tab, tab_entries
from router.sessions.control import ControlError
from router.sessions.table import Session

log = logging.getLogger("mcp_router.sessions")

THUMBNAIL_TIMEOUT: Final = 5.0  # a page that does not paint in time is shown without a picture
THUMBNAIL_TYPE: Final = "jpeg"


async def page_picture(session: Session) -> tuple[bytes, str] | None:
    """``(image, mime type)`` of the session's current page, or None when it has no live browser
    (dormant, never browsed) or the picture could not be taken in time."""
    connection, control = session.connection, session.control
    if connection is None or control is None or not session.browser_used or not connection.worker.alive():
        return None
    output_dir = connection.worker.output_dir
    with anyio.move_on_after(THUMBNAIL_TIMEOUT):
        # Not while a resume, a save's restore or the session's end drives the control session.
        async with session.lock:
            if session.control is not control:
                return None
            try:
                # The client's own session (a shared browser's context) is on the client's tab already.
                tab = None
                if control.session_id != session.worker_session_id:
                    tab = _client_tab(tab_entries(await control.call("browser_tabs", {"action": "list"})), session)
                if tab is not None:
                    await control.call("browser_tabs", {"action": "select", "index": tab.index})
                result = await control.call_result("browser_take_screenshot", {"type": THUMBNAIL_TYPE})
            except ControlError as exc:
                log.info("page picture not taken session=%s: %s", session.id, exc)
                return None
            for _, raw in file_links(result):
                if (kept := resolve_inside(raw, output_dir)) is not None:
                    with contextlib.suppress(OSError):
                        kept.unlink()
            for part in result.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "image":
                    with contextlib.suppress(binascii.Error, ValueError):
                        return base64.b64decode(str(part.get("data", "")), validate=True), str(part.get("mimeType"))
    return None


def _client_tab(tabs: list[Tab], session: Session) -> Tab | None:
    """The tab showing the page the client's answers last showed (the first such, if several)."""
    return next((tab for tab in tabs if tab.url == session.current_url), None)
