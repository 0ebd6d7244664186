"""Waiting on what continuity saves under the state dir (sessions/<id>/state.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from router.json_files import write_json
from tests.support.client import RawClient
from tests.support.wait import wait_for

SAVE_WAIT = 20.0  # a session saves at most every upkeep.SAVE_MIN_INTERVAL


def saved_state(state_dir: Path, session_id: str, needle: str) -> bool:
    """True once the session's saved browser state holds ``needle`` (a cookie value, a URL)."""
    try:
        return needle in (state_dir / "sessions" / session_id / "state.json").read_text()
    except OSError:
        return False


def wait_saved(state_dir: Path, client: RawClient, *needles: str) -> None:
    sid = client.session_id or ""
    wait_for(lambda: all(saved_state(state_dir, sid, n) for n in needles), timeout=SAVE_WAIT)


class SavingControl:
    """What a save asks the worker: its storage state (written where asked) and its tabs."""

    def __init__(self, storage: dict[str, Any], tabs: list[str]) -> None:
        self.storage = storage
        self.tabs = tabs

    async def tool_names(self) -> set[str]:
        return {"browser_storage_state", "browser_set_storage_state", "browser_tabs"}

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        if name == "browser_storage_state":
            write_json(Path((arguments or {})["filename"]), self.storage)
            return ""
        assert name == "browser_tabs"
        return "\n".join(f"- {i}: [T{i}]({url})" for i, url in enumerate(self.tabs))
