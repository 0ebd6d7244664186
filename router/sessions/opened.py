"""The record's row for a session that opened, got a worker, or a new browser session."""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.sessions.table import Session
from workers.supervisor import Worker

if TYPE_CHECKING:
    from router.record.recorder import Recorder


def record_opened(
    recorder: Recorder | None, session: Session, worker: Worker | None, *, browser_session: str | None = None
) -> None:
    """The record's row for a session that opened or got a worker (``worker`` None: not yet), or
    for a new browser session of it (create_new_session), linked to it."""
    if recorder is None:
        return
    recorder.session_opened(
        browser_session or session.id, client_info=session.client_info, protocol_version=session.protocol_version,
        port=worker.port if worker else None, pid=worker.pid if worker else None,
        metadata={"browser_session_of": session.id} if browser_session else
        {"initialize": session.initialize_params, "response_mode": session.response_mode},
        parent_id=session.id if browser_session else None, conversation=session.conversation,
    )  # fmt: skip
