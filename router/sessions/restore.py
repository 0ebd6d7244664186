"""Bringing a dormant session's browser back through the control session: cookies and storage,
the tabs, the current page loaded as often as before (so its element refs are the same again),
and each part's time logged ("state restored …"), since a resume waits for all of it."""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from router.json_files import write_json
from router.sessions import statefiles
from router.sessions.control import ControlError, ControlSession
from router.sessions.storage_restore import restore_in_tab, sets_anything, split_origins
from router.sessions.unrestored import BLANK, Unrestored, left_out

log = logging.getLogger("mcp_router.continuity")

# Playwright reads storage state only under the worker's output dir (or its cwd).
MAX_RESTORED_TABS: Final = 10  # a runaway page opening tabs must not make every resume slow
MAX_REF_FRAME: Final = 8  # past this many documents in a tab, refs are re-taken, not reproduced


@dataclass
class RestoreProgress:
    """How far a restore got, read by its caller also when it was cut short or failed."""

    saved: dict[str, Any] | None = None
    storage_done: bool = False
    tabs_done: bool = False

    def left_out(self) -> Unrestored | None:
        return left_out(self.saved, storage_done=self.storage_done, tabs_done=self.tabs_done)


async def restore_browser(
    session_dir: Path, control: ControlSession, output_dir: Path, *, fresh_profile: bool,
    progress: RestoreProgress | None = None,
) -> bool:
    """Cookies, storage and tabs back through the control session, then the current tab's
    snapshot re-taken so refs resolve. False when nothing was saved. ``progress`` notes each
    part once it is in.

    ``fresh_profile``: the browser started on an empty profile (a warm worker's), so nothing
    saved needs no ``browser_set_storage_state``. On the session's own profile (a spawn of its
    own) the call still runs: it clears what the profile kept and the save did not (cookies
    set after the last save), so the browser holds what was saved and no more."""
    state = statefiles.read_state(session_dir)
    if state is None:
        return False
    progress = progress or RestoreProgress()
    progress.saved = state
    marks = [time.monotonic()]
    tabs = [t for t in state.get("tabs", []) if isinstance(t, str)][:MAX_RESTORED_TABS]
    current = state.get("current")
    if not tabs and isinstance(current, str):
        tabs = [current]
    current = current if isinstance(current, str) else None
    frame = state.get("ref_frame")
    reloads: int = frame if isinstance(frame, int) and 0 < frame <= MAX_REF_FRAME and current is not None else 0
    # A restore document loaded in the first tab stands in for one reload of the current page,
    # so only while that tab is the current one and loads a page after it.
    first_is_current = bool(tabs) and tabs[0] != BLANK and _selected(tabs, current) == 0
    storage = state.get("storage")
    if isinstance(storage, dict):
        origins = storage.get("origins")
        split = split_origins(origins if isinstance(origins, list) else [], current, reloads if first_is_current else 0)
        if not fresh_profile or sets_anything(storage, split.elsewhere):
            await _set_storage_state(control, output_dir, {**storage, "origins": split.elsewhere}, session_dir.name)
        if split.in_tab:
            done = await restore_in_tab(control, split.in_tab)
            if done.restored < len(split.in_tab):  # Playwright's way for what the tab did not take
                rest = split.elsewhere + split.in_tab[done.restored :]
                await _set_storage_state(control, output_dir, {**storage, "origins": rest}, session_dir.name)
            reloads -= done.documents
    progress.storage_done = True
    marks.append(time.monotonic())
    await _open_tabs(control, tabs, current)
    progress.tabs_done = True
    marks.append(time.monotonic())
    # Each document a tab loads numbers its refs with the next frame prefix: load the page as
    # often as before, so "f2e3" is the same button again.
    for _ in range(reloads):
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
        "state restored session=%s tabs=%d ref_frame=%s reloads=%d storage_ms=%d tabs_ms=%d reload_ms=%d"
        " snapshot_ms=%d",
        session_dir.name, len(tabs), frame, reloads, storage_ms, tabs_ms, reload_ms, snapshot_ms,
    )  # fmt: skip
    return True


async def _open_tabs(control: ControlSession, tabs: list[str], current: str | None) -> None:
    for index, url in enumerate(tabs):
        try:
            if index == 0:
                if url != BLANK:
                    await control.call("browser_navigate", {"url": url})
            else:
                await control.call("browser_tabs", {"action": "new", "url": url})
        except ControlError as exc:  # a page that is gone must not fail the resume
            log.info("restoring tab %d (%s) failed: %s", index, url, exc)
    if len(tabs) > 1:
        with contextlib.suppress(ControlError):
            await control.call("browser_tabs", {"action": "select", "index": _selected(tabs, current)})


def _selected(tabs: list[str], current: str | None) -> int:
    return tabs.index(current) if current in tabs else 0


async def _set_storage_state(
    control: ControlSession, output_dir: Path, storage: dict[str, Any], session_id: str
) -> None:
    restore = statefiles.exchange_file(output_dir, "restore", session_id)
    write_json(restore, storage)
    try:
        await control.call("browser_set_storage_state", {"filename": str(restore)})
    finally:
        restore.unlink(missing_ok=True)
