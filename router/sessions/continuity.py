"""What a session leaves on disk so that a new worker can take it up, and how it is taken up.

``sessions/<id>/session.json`` (written at open, touched when the session goes dormant): the
client's initialize params and response mode, so a new worker can be handed the same handshake
after a reap, a crash or a restart of the router — without the record, which may be off.
``sessions/<id>/state.json``: Playwright storage state (every cookie, session cookies included,
and localStorage per origin) plus the open tabs' URLs. The ``--user-data-dir`` profile beside
them brings back persistent cookies by itself, but not session cookies (most logins).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Final

import httpx

from router.sessions.control import ControlError, WorkerSession
from router.sessions.table import MINTED_ID_RE, Session, State
from workers.health import RestartBudget
from workers.supervisor import Worker

log = logging.getLogger("mcp_router.resume")

SESSION_FILE: Final = "session.json"
STATE_FILE: Final = "state.json"
# Playwright writes and reads storage state only under the worker's output dir (or its cwd).
SAVE_NAME: Final = ".router-storage-save.json"
RESTORE_NAME: Final = ".router-storage-restore.json"
STORAGE_TOOLS: Final = frozenset({"browser_storage_state", "browser_set_storage_state"})
MAX_RESTORED_TABS: Final = 10  # a runaway page opening tabs must not make every resume slow
RESUMED_NOTICE: Final = (
    "[mcp-router] The browser was restored after a restart; element refs are stale — take a fresh browser_snapshot."
)
_PAGE_URL = re.compile(r"^- Page URL: (\S+)", re.MULTILINE)
# "- 1: (current) [Title](url)"; the title may hold brackets, so the URL is the last (...) group.
_TAB = re.compile(r"^- (\d+): (?:\(current\) )?\[.*\]\(([^()\s]*)\)\s*$", re.MULTILINE)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: a SIGKILL mid-write leaves the previous file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_session_file(session_dir: Path, data: dict[str, Any]) -> None:
    _write_json(session_dir / SESSION_FILE, {**data, "last_active": data.get("last_active") or time.time()})


def forget_session_file(session_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (session_dir / SESSION_FILE).unlink()


def read_session_file(session_dir: Path) -> dict[str, Any] | None:
    return _read_json(session_dir / SESSION_FILE)


def last_active(session_dir: Path) -> float:
    """Wall time of the session's last sign of life on disk (a SIGKILLed router wrote no more)."""
    stamps = [0.0]
    data = read_session_file(session_dir)
    if data is not None and isinstance(data.get("last_active"), int | float):
        stamps.append(float(data["last_active"]))
    for name in (SESSION_FILE, STATE_FILE):
        with contextlib.suppress(OSError):
            stamps.append((session_dir / name).stat().st_mtime)
    return max(stamps)


def has_state(session_dir: Path) -> bool:
    return (session_dir / STATE_FILE).exists()


def page_url(text: str) -> str | None:
    """The last page URL a worker's answer text names, if any."""
    found = _PAGE_URL.findall(text)
    return found[-1] if found else None


def parse_tabs(text: str) -> list[str]:
    tabs = sorted((int(i), url) for i, url in _TAB.findall(text))
    return [url for _, url in tabs]


def clear_output(worker_output: Path) -> None:
    """A dormant session's snapshot and console files: already in the record, never read again."""
    shutil.rmtree(worker_output, ignore_errors=True)


async def storage_supported(http: httpx.AsyncClient, worker: Worker) -> bool:
    """Whether this kind of worker has the storage tools (the stand-in worker and other MCP
    servers routed through a custom template do not)."""
    control = WorkerSession(http, worker.url, worker.host_header)
    try:
        await control.open()
        return await control.tool_names() >= STORAGE_TOOLS
    except ControlError:
        return False
    finally:
        await control.close()


async def save_state(http: httpx.AsyncClient, worker: Worker, session_dir: Path, current_url: str | None) -> None:
    """Storage state and tab URLs to ``state.json`` through a short-lived control session.

    Only call this once the client's own session has launched the browser: a browser launched by
    the control session closes again when it ends. Raises ControlError.
    """
    control = WorkerSession(http, worker.url, worker.host_header)
    target = worker.output_dir / SAVE_NAME
    try:
        await control.open()
        await control.call("browser_storage_state", {"filename": str(target)})
        tabs = parse_tabs(await control.call("browser_tabs", {"action": "list"}))
    finally:
        await control.close()
    storage = _read_json(target)
    target.unlink(missing_ok=True)
    if storage is None:
        raise ControlError("storage state file missing or unreadable")
    _write_json(
        session_dir / STATE_FILE,
        {"storage": storage, "tabs": tabs, "current": current_url, "saved": time.time()},
    )


async def restore_state(client_session: WorkerSession, worker: Worker, session_dir: Path) -> bool:
    """Cookies, storage and tabs back, through the client's own (replayed) worker session.

    The client's session, not a control session, does it: a browser launched by a session that
    then ends is closed with it, and the current tab is a per-session notion. False when nothing
    was saved. Raises ControlError only when the storage itself cannot be restored.
    """
    state = _read_json(session_dir / STATE_FILE)
    if state is None:
        return False
    storage = state.get("storage")
    if isinstance(storage, dict):
        restore = worker.output_dir / RESTORE_NAME
        _write_json(restore, storage)
        try:
            await client_session.call("browser_set_storage_state", {"filename": str(restore)})
        finally:
            restore.unlink(missing_ok=True)
    tabs = [t for t in state.get("tabs", []) if isinstance(t, str)][:MAX_RESTORED_TABS]
    current = state.get("current")
    if not tabs and isinstance(current, str):
        tabs = [current]
    await _open_tabs(client_session, tabs, current if isinstance(current, str) else None)
    return True


async def _open_tabs(client_session: WorkerSession, tabs: list[str], current: str | None) -> None:
    for index, url in enumerate(tabs):
        try:
            if index == 0:
                if url != "about:blank":
                    await client_session.call("browser_navigate", {"url": url})
            else:
                await client_session.call("browser_tabs", {"action": "new", "url": url})
        except ControlError as exc:  # a page that is gone must not fail the resume
            log.info("restoring tab %d (%s) failed: %s", index, url, exc)
    if len(tabs) > 1:
        selected = tabs.index(current) if current in tabs else 0
        with contextlib.suppress(ControlError):
            await client_session.call("browser_tabs", {"action": "select", "index": selected})


def session_record(session: Session) -> dict[str, Any]:
    """What session.json keeps: enough for a new worker (and a new router run) to resume it."""
    return {
        "id": session.id,
        "initialize": session.initialize_params,
        "response_mode": session.response_mode,
        "client_info": session.client_info,
        "protocol_version": session.protocol_version,
        "created": session.created,
        "last_active": max(session.last_activity, time.time() - session.idle_for(time.monotonic())),
    }


def session_from_disk(session_dir: Path, session_id: str, retention: float, budget: RestartBudget) -> Session | None:
    """A dormant session of a previous run, if its files are there and within retention."""
    if not MINTED_ID_RE.fullmatch(session_id):  # never turn a client's string into a path otherwise
        return None
    data = read_session_file(session_dir)
    active = last_active(session_dir)
    if data is None or time.time() - active > retention:
        return None
    params, info = data.get("initialize"), data.get("client_info")
    version = data.get("protocol_version")
    return Session(
        session_id,
        response_mode=str(data.get("response_mode") or "full"),
        state=State.INTERRUPTED,
        created=float(data.get("created") or active),
        last_activity=active,
        protocol_version=version if isinstance(version, str) else None,
        client_info=info if isinstance(info, dict) else {},
        initialize_params=params if isinstance(params, dict) else {},
        browser_used=has_state(session_dir),
        budget=budget,
    )
