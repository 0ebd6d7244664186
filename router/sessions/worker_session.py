"""A worker that forgot a client's MCP session (it ends one whose ping went unanswered while the
client's GET stream was away): a new one for the client's handshake on the same, living worker."""

from __future__ import annotations

import contextlib
import logging

import anyio

from router.sessions.continuity import RESTORE_BUDGET, Continuity
from router.sessions.control import ControlError, ControlSession
from router.sessions.prepared_stream import hold_for_streamless
from router.sessions.restore import restore_browser
from router.sessions.resume_notice import LOST_SESSION_REASON, resumed_notice
from router.sessions.table import Session
from router.upstream.connection import WorkerConnection

log = logging.getLogger("mcp_router.continuity")


async def reopen(continuity: Continuity, session: Session, connection: WorkerConnection) -> bool:
    """A new worker session for the client's handshake on the same, living worker."""
    replay = ControlSession(connection)
    try:
        session.worker_session_id = await replay.open(session.initialize_params or None)
    except ControlError as exc:
        log.warning("worker session lost and not reopened session=%s: %s", session.id, exc)
        return False
    session.roots.worker_opened()
    session.asked.clear()
    session.worker_has_roots = False
    continuity.drop_held(session)  # the old worker session's
    # On a shared worker the lost session took its context along: the new one, empty, is
    # the client's context now, and gets the last save back before any call of the client's.
    restore = continuity.shares(connection.worker) and session.browser_used
    held = await hold_for_streamless(
        session, replay, waited=True, start_soon=continuity.start_soon, for_router_calls=restore
    )
    if continuity.shares(connection.worker):
        session.control = replay
    if restore:
        with anyio.move_on_after(RESTORE_BUDGET), contextlib.suppress(ControlError):
            if await restore_browser(
                continuity.layout.session_dir(session.id), replay, connection.worker.output_dir, fresh_profile=True
            ):
                session.resumed_notice = resumed_notice(LOST_SESSION_REASON)
    if held is not None:
        session.adopted_stream = (connection, held)
    session.worker_switched()  # the client's GET stream follows the new worker session
    log.info("worker session reopened session=%s", session.id)
    return True
