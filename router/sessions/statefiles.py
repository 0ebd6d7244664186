"""What a session leaves on disk so that a new worker (or a new run of the router) can take it up.

``sessions/<id>/session.json`` (written at open, touched when the session goes dormant, and
rewritten when the client's roots change): the client's initialize params, response mode and
last roots, so a new worker can be handed the same handshake, and the client's project as its
roots, after a reap, a crash or a restart of the router — without the record, which may be off,
and before the client's GET stream is back to be asked. Whatever a file holds that is not what
the router writes reads as absent: a session file is read at start-up (retention) and at a
client's request, and neither may fail for a file garbled by a full disk or by hand.
``sessions/<id>/state.json``: Playwright storage state (every cookie, session cookies included,
and localStorage per origin) plus the open tabs' URLs. The ``--user-data-dir`` profile beside
them brings back persistent cookies by itself, but not session cookies (most logins).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import re
import shutil
import time
from pathlib import Path
from typing import Any, Final

from router.json_files import read_json, write_json, write_text
from router.layout import SESSION_FILE, STATE_FILE, StateLayout, session_tag
from router.sessions.roots import roots_of
from router.sessions.table import ENDED, MINTED_ID_RE, Session, State
from workers.health import RestartBudget

log = logging.getLogger("mcp_router.continuity")

CONVERSATION_RE: Final = re.compile(r"[0-9a-f]{64}")  # what conversations.conversation_id makes




def write_session_file(session_dir: Path, data: dict[str, Any]) -> None:
    write_json(session_dir / SESSION_FILE, {**data, "last_active": data.get("last_active") or time.time()})


def keep_session(session_dir: Path, session: Session) -> bool:
    """``session.json`` for a session, written now and again whenever the client's roots change
    (``keep_roots``); a loud line when the disk refuses it (full, read-only) or its params cannot
    be written: the session goes on serving, it is just not resumable after a restart of the
    router. Never raises: the caller has the session in its table already."""
    keep_roots(session_dir, session)
    return _write_session(session_dir, session)


def keep_roots(session_dir: Path, session: Session) -> None:
    """The client's roots into ``session.json`` each time they change: on the client's answer to
    the router's ``roots/list``, never on a tool call. Not once the session has ended: its file
    is gone for good then."""

    def written() -> None:
        if session.state not in ENDED:
            _write_session(session_dir, session)

    session.roots.on_new(written)


def _write_session(session_dir: Path, session: Session) -> bool:
    try:
        write_session_file(session_dir, session_record(session))
    except (OSError, ValueError, RecursionError) as exc:  # the disk, or params that JSON cannot write
        log.error("session file not written session=%s (%s): %s", session.id, session_dir, exc)
        return False
    return True


def forget_session_file(session_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (session_dir / SESSION_FILE).unlink()


def read_session_file(session_dir: Path) -> dict[str, Any] | None:
    return read_json(session_dir / SESSION_FILE)


def last_active(session_dir: Path) -> float:
    """Wall time of the session's last sign of life on disk (a SIGKILLed router wrote no more)."""
    stamps = [0.0]
    data = read_session_file(session_dir)
    written = _seconds(data.get("last_active")) if data is not None else None
    if written is not None:
        stamps.append(written)
    for name in (SESSION_FILE, STATE_FILE):
        with contextlib.suppress(OSError):
            stamps.append((session_dir / name).stat().st_mtime)
    return max(stamps)


def _seconds(value: object) -> float | None:
    """A time a session file holds, or None for anything else (a string, an integer too large
    for a float, infinity)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def has_state(session_dir: Path) -> bool:
    return (session_dir / STATE_FILE).exists()


def read_state(session_dir: Path) -> dict[str, Any] | None:
    return read_json(session_dir / STATE_FILE)


def write_state(session_dir: Path, data: dict[str, Any], *, unless: bytes | None = None) -> tuple[bytes, bool]:
    """``data`` to ``state.json`` with the time of this write, unless ``unless`` is the digest of
    the same ``data`` and the file is still there: the save after a click that changed nothing
    (a state save is ~3 ms of the router's CPU, its write ~0.4 ms of that). The digest of
    ``data`` back, and whether it was written."""
    text = json.dumps(data)
    digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
    path = session_dir / STATE_FILE
    if digest == unless and path.exists():
        return digest, False
    # The time goes in after the text that was hashed (the storage state may be large): one
    # serialisation per save. ``data`` is never empty, so its text ends with its closing brace.
    write_text(path, f'{text[:-1]}, "saved": {time.time()!r}}}')
    return digest, True


def exchange_file(worker_output: Path, kind: str, session_id: str) -> Path:
    """Where the router hands the worker a session's storage state, or takes it from it (``kind``
    ``save`` or ``restore``): named per session, for a worker's output directory may be shared by
    several sessions (hosts.py), and never by the session id, which is a bearer secret."""
    return worker_output / f".router-storage-{kind}-{session_tag(session_id)}.json"


def clear_output(worker_output: Path) -> None:
    """A dormant session's snapshot and console files: already in the record, never read again."""
    shutil.rmtree(worker_output, ignore_errors=True)


def session_record(session: Session) -> dict[str, Any]:
    """What session.json keeps: enough for a new worker (and a new router run) to resume it."""
    return {
        "id": session.id,
        "initialize": session.initialize_params,
        "response_mode": session.response_mode,
        "client_info": session.client_info,
        "protocol_version": session.protocol_version,
        "roots": session.roots.last,
        "conversation": session.conversation,
        "browsed": session.browser_used,
        "created": session.created,
        "last_active": max(session.last_activity, time.time() - session.idle_for(time.monotonic())),
    }


def session_from_disk(
    layout: StateLayout, session_id: str, retention: float, budget: RestartBudget
) -> Session | None:
    """A dormant session of a previous run, if its files are there and within retention. None for
    an id this router could not have minted, before any path is made of it (a client's string)."""
    if not MINTED_ID_RE.fullmatch(session_id):
        return None
    session_dir = layout.session_dir(session_id)
    data = read_session_file(session_dir)
    active = last_active(session_dir)
    if data is None or time.time() - active > retention:
        return None
    params, info = data.get("initialize"), data.get("client_info")
    version = data.get("protocol_version")
    session = Session(
        session_id,
        response_mode=str(data.get("response_mode") or "full"),
        state=State.INTERRUPTED,
        created=_seconds(data.get("created")) or active,
        last_activity=active,
        protocol_version=version if isinstance(version, str) else None,
        client_info=info if isinstance(info, dict) else {},
        initialize_params=params if isinstance(params, dict) else {},
        browser_used=has_state(session_dir) or data.get("browsed") is True,
        budget=budget,
    )
    conversation = data.get("conversation")
    if isinstance(conversation, str) and CONVERSATION_RE.fullmatch(conversation):
        session.conversation = conversation
    roots = roots_of(data.get("roots"))
    if roots is not None:  # the first worker after the restart gets them, asked or not
        session.roots.restore(roots)
    keep_roots(session_dir, session)
    return session
