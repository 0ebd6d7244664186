"""Why a session took a new worker up, and the notice its next tool answer carries about it."""

from __future__ import annotations

from typing import Final

from router.sessions.table import State

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
    "crash": "its browser worker crashed",
    "hibernation": "it was hibernated to make room",
    "router-restart": "a restart of the router",
    "new-browser": "create_new_session",
}


NOTICE_PREFIX: Final = "[mcp-router] This conversation's browser was restored"


def resumed_notice(reason: str) -> str:
    return (
        f"{NOTICE_PREFIX} after {REASON_TEXT.get(reason, reason)}: "
        "cookies, storage and tabs are back and the page was reloaded, so element refs from before "
        "refer to the reloaded page (they resolve where it is unchanged)."
    )
