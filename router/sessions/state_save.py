"""Saving a session's browser (storage state and tab URLs) to ``state.json`` through its
control session, before its worker ends (``Continuity.go_dormant``) and debounced after calls
that change it (``Upkeep``); ``restore.py`` reads it back onto a new worker."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import anyio

from router.json_files import read_json
from router.layout import StateLayout
from router.record.tabs_and_refs import parse_tabs
from router.sessions import statefiles
from router.sessions.control import ControlError, ControlSession
from router.sessions.conversations import ConversationStore
from router.sessions.page_crash import answer_reports_crash, put_back
from router.sessions.resume_notice import settled_ref_frame
from router.sessions.storage_restore import is_restore_document
from router.sessions.table import Session
from router.sessions.unrestored import BLANK
from router.upstream.connection import WorkerConnection

log = logging.getLogger("mcp_router.continuity")

SAVE_TIMEOUT: Final = 5.0  # a wedged worker must not hold a reap or a shutdown for long
# Playwright writes and reads storage state only under the worker's output dir (or its cwd).
STORAGE_TOOLS: Final = frozenset({"browser_storage_state", "browser_set_storage_state"})


class BrowserStateSaver:
    def __init__(self, layout: StateLayout, conversations: ConversationStore | None = None) -> None:
        self.layout = layout
        self.conversations = conversations  # each save of a conversation's session is its state too
        self._storage: bool | None = None  # does this kind of worker have the storage tools?
        self.written = 0  # saves that wrote state.json (for /metrics)
        self.unchanged = 0  # saves that found it holding the same state already
        # Told of a page found crashed by a save (BrowserWatches.page_crashed, set by the manager).
        self.on_page_crash: Callable[[Session, WorkerConnection], None] | None = None

    async def save(self, session: Session, connection: WorkerConnection, control: ControlSession | None) -> None:
        """Storage state and tab URLs to ``state.json`` through the control session."""
        if not session.browser_used or control is None or not connection.worker.alive():
            return
        with anyio.move_on_after(SAVE_TIMEOUT):
            if self._storage is None:
                try:
                    self._storage = await control.tool_names() >= STORAGE_TOOLS
                except ControlError:
                    return
            if not self._storage:
                return
            started = time.monotonic()
            target = statefiles.exchange_file(connection.worker.output_dir, "save", session.id)
            try:
                await control.call("browser_storage_state", {"filename": str(target)})
                listing = await control.call("browser_tabs", {"action": "list"})
                tabs = [t for t in parse_tabs(listing) if not is_restore_document(t)]
                if self._page_lost(session, connection, listing) and session.current_url is not None:
                    tabs = put_back(tabs, session.current_url)
                storage = read_json(target)
                if storage is None:
                    raise ControlError("storage state file missing or unreadable")
                if session.unrestored is not None:  # a resume left part of the saved state out
                    storage, tabs = session.unrestored.under(storage, tabs)
                session.state_digest, written = statefiles.write_state(
                    self.layout.session_dir(session.id),
                    {
                        "storage": storage,
                        "tabs": tabs,
                        "current": session.current_url,
                        "ref_frame": settled_ref_frame(session),
                    },
                    unless=session.state_digest,
                )
                if not written:
                    self.unchanged += 1  # and its conversation holds this state already
                else:
                    self.written += 1
                if written and self.conversations is not None and session.conversation is not None:
                    self.conversations.keep(
                        session.conversation, session.id, session.created, self.layout.state_file(session.id)
                    )
            except (ControlError, OSError) as exc:
                log.info("state save failed session=%s: %s", session.id, exc)
                return
            finally:
                target.unlink(missing_ok=True)
            log.debug("state saved session=%s ms=%.0f", session.id, (time.monotonic() - started) * 1000)

    def _page_lost(self, session: Session, connection: WorkerConnection, listing: str) -> bool:
        """Whether the session's page crashed under this worker: known already, or found by this
        listing (Playwright then told only the router's session, page_crash.py)."""
        if session.page_lost_on is connection:
            return True
        if session.current_url in (None, BLANK) or not answer_reports_crash(listing, connection.worker.output_dir):
            return False
        session.page_lost_on = connection
        if self.on_page_crash is not None:
            self.on_page_crash(session, connection)
        return True
