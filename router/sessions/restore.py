"""Bringing a dormant session's browser back through the control session: cookies and storage,
the tabs, the current page loaded as often as before (so its element refs are the same again),
and each part's time logged ("state restored …"), since a resume waits for all of it."""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from pathlib import Path
from typing import Final

from router.sessions import statefiles
from router.sessions.control import ControlError, ControlSession

log = logging.getLogger("mcp_router.continuity")

# Playwright reads storage state only under the worker's output dir (or its cwd).
RESTORE_NAME: Final = ".router-storage-restore.json"
MAX_RESTORED_TABS: Final = 10  # a runaway page opening tabs must not make every resume slow
MAX_REF_FRAME: Final = 8  # past this many documents in a tab, refs are re-taken, not reproduced


async def restore_browser(session_dir: Path, control: ControlSession, output_dir: Path) -> bool:
    """Cookies, storage and tabs back through the control session, then the current tab's
    snapshot re-taken so refs resolve. False when nothing was saved."""
    state = statefiles.read_state(session_dir)
    if state is None:
        return False
    marks = [time.monotonic()]
    storage = state.get("storage")
    if isinstance(storage, dict):
        restore = output_dir / RESTORE_NAME
        statefiles.write_json(restore, storage)
        try:
            await control.call("browser_set_storage_state", {"filename": str(restore)})
        finally:
            restore.unlink(missing_ok=True)
    marks.append(time.monotonic())
    tabs = [t for t in state.get("tabs", []) if isinstance(t, str)][:MAX_RESTORED_TABS]
    current = state.get("current")
    if not tabs and isinstance(current, str):
        tabs = [current]
    current = current if isinstance(current, str) else None
    await _open_tabs(control, tabs, current)
    marks.append(time.monotonic())
    frame = state.get("ref_frame")
    if isinstance(frame, int) and 0 < frame <= MAX_REF_FRAME and current is not None:
        # Each document a tab loads numbers its refs with the next frame prefix: load the page
        # as often as before, so "f2e3" is the same button again.
        for _ in range(frame):
            try:
                await control.call("browser_navigate", {"url": current})
            except ControlError as exc:
                log.info("re-loading for refs failed session=%s: %s", session_dir.name, exc)
                break
    marks.append(time.monotonic())
    if len(tabs) > 1:
        # The current tab was selected, not loaded last: its snapshot makes the refs. (A
        # navigation takes one by itself, and refs belong to the page, not to a session.)
        with contextlib.suppress(ControlError):
            await control.call("browser_snapshot")
    marks.append(time.monotonic())
    storage_ms, tabs_ms, reload_ms, snapshot_ms = (round((b - a) * 1000) for a, b in itertools.pairwise(marks))
    log.info(
        "state restored session=%s tabs=%d ref_frame=%s storage_ms=%d tabs_ms=%d reload_ms=%d snapshot_ms=%d",
        session_dir.name, len(tabs), frame, storage_ms, tabs_ms, reload_ms, snapshot_ms,
    )  # fmt: skip
    return True


async def _open_tabs(control: ControlSession, tabs: list[str], current: str | None) -> None:
    for index, url in enumerate(tabs):
        try:
            if index == 0:
                if url != "about:blank":
                    await control.call("browser_navigate", {"url": url})
            else:
                await control.call("browser_tabs", {"action": "new", "url": url})
        except ControlError as exc:  # a page that is gone must not fail the resume
            log.info("restoring tab %d (%s) failed: %s", index, url, exc)
    if len(tabs) > 1:
        selected = tabs.index(current) if current in tabs else 0
        with contextlib.suppress(ControlError):
            await control.call("browser_tabs", {"action": "select", "index": selected})
