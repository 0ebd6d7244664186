"""Ending a session for good from the command line (`mcp-router sessions --end ID`).

A running router owns its sessions, so the command asks it through the operator API
(``POST /api/sessions/{id}/end``, router/operator/api.py, with its action header);
it finds the router through ``router.json`` in the state dir, written while the router runs.
With no router running, the command marks the session closed in the record and deletes its files.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Final

import httpx

from router.api_client import bearer
from router.http.auth import WeakToken, read_token
from router.layout import StateLayout
from router.record import schema
from router.router_file import running_router
from router.types import ACTION_HEADER

ADMIN_TIMEOUT: Final = 30.0  # ending a session waits for its worker's grace period


def state_dir_token(state_dir: Path) -> str | None:
    """The token a router of this state dir asks for (None: none yet, or unreadable)."""
    try:
        return read_token(state_dir)
    except (OSError, WeakToken):
        return None


def end_session(state_dir: Path, session_id: str) -> tuple[bool, str]:
    """Ends a session for good, through the running router if there is one. (ok, message)"""
    url = running_router(state_dir)
    if url is not None:
        try:
            response = httpx.post(
                f"{url}/api/sessions/{session_id}/end",
                headers={ACTION_HEADER: "1", **bearer(state_dir_token(state_dir))},
                timeout=ADMIN_TIMEOUT,
                trust_env=False,
            )
        except httpx.HTTPError as exc:
            return False, f"the router at {url} did not answer: {exc}"
        if response.status_code == 404:
            return False, f"no such session {session_id}"
        if response.status_code != 200:
            return False, f"the router answered {response.status_code}: {response.text[:200]}"
        return True, f"ended {session_id} (through the router at {url})"
    return _end_offline(state_dir, session_id)


def _end_offline(state_dir: Path, session_id: str) -> tuple[bool, str]:
    layout = StateLayout(state_dir)
    try:
        session_dir = layout.session_dir(session_id)
    except ValueError:
        return False, f"no such session {session_id}"
    found = session_dir.is_dir()
    db = layout.db
    if db.exists():
        conn = schema.connect(db)
        try:
            cur = conn.execute("UPDATE sessions SET state = 'closed' WHERE id = ?", (session_id,))
            found = found or cur.rowcount > 0
        except sqlite3.Error as exc:
            return False, f"could not update the record: {exc}"
        finally:
            conn.close()
    shutil.rmtree(session_dir, ignore_errors=True)
    return (True, f"ended {session_id}") if found else (False, f"no such session {session_id}")
