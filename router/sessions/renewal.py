"""``create_new_session``: a fresh browser (new worker, empty profile) under the same session."""

from __future__ import annotations

import logging
import secrets

from router.sessions import statefiles
from router.sessions.continuity import Continuity
from router.sessions.opened import record_opened
from router.sessions.table import Session, State

log = logging.getLogger("mcp_router.continuity")


async def renew_browser(continuity: Continuity, session: Session) -> str:
    """A fresh browser (new worker, empty profile) under the same session; returns the new
    browser session's id, which the record links to this session."""
    browser_session = "browser-" + secrets.token_urlsafe(12)
    async with session.lock:
        worker_session = session.worker_session_id
        connection = continuity.detach(session, State.HIBERNATED)
        if connection is not None:
            if worker_session is not None and continuity.shares(connection.worker):
                await connection.delete_session(worker_session)  # its context, on a host that lives on
            await connection.aclose()
            if continuity.recorder is not None:
                await continuity.recorder.flush()  # the recorder reads the output dir's files first
            await continuity.end_worker(session, connection.worker)
        await continuity.supervisor.stop(session.id)
        await continuity.supervisor.forget(session.id)  # profile and saved state: cookies, storage
        session.browser_used = False
        session.current_url = None
        session.ref_frame, session.ref_frame_file = 0, None
        await continuity.attach(session, reason="new-browser")
    statefiles.keep_session(continuity.layout.session_dir(session.id), session)
    if session.connection is not None:
        record_opened(continuity.recorder, session, session.connection.worker, browser_session=browser_session)
    log.info("new browser session=%s browser_session=%s", session.id, browser_session)
    return browser_session
