"""A conversation's browser, kept across its MCP sessions.

A client that is closed and resumed (``claude --resume``) opens a new MCP session. When it names
its conversation on ``initialize`` (the ``Mcp-Router-Conversation`` header; ``mcp-router stdio``
sends ``CLAUDE_CODE_SESSION_ID``), the new session starts from the browser state that
conversation's newest session saved: its ``state.json`` is copied in at ``open`` and restored at
the first browser call, as a resume restores a reaped session.

Keys are never stored: a conversation is known by ``sha256(scope, key)``, where the scope is
derived from the token the request showed (``router.http.auth.conversation_scope``), so the same
key under another token is another conversation. Each session keeps a copy of its own: a second
live session of one conversation (a fork) gets the state, never the other's browser.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Final

from router.errors import BadRequest
from router.json_files import read_json, write_text
from router.layout import StateLayout

log = logging.getLogger("mcp_router.continuity")

MAX_KEY_CHARS: Final = 128
# A UUID (Claude Code's session id) and the like: no spaces, quotes or separators of other headers.
KEY_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]*")
OWNER: Final = "conversation_owner"  # in a conversation file: the session whose state it is
OWNER_CREATED: Final = "conversation_owner_created"


def conversation_id(scope: str, key: str) -> str:
    """The conversation ``key`` names under ``scope``; 400 for a key that is malformed or too long."""
    if len(key) > MAX_KEY_CHARS:
        raise BadRequest(f"Bad Request: the conversation key is longer than {MAX_KEY_CHARS} characters")
    if not KEY_RE.fullmatch(key):
        raise BadRequest("Bad Request: the conversation key must be letters, digits and . _ : @ + = - only")
    return hashlib.sha256(f"{scope}\0{key}".encode()).hexdigest()


class ConversationStore:
    """``<state>/conversations/<id>.json``: the newest saved browser state of each conversation
    (the ``state.json`` format, with the session it came from)."""

    def __init__(self, layout: StateLayout, retention: float) -> None:
        self.layout = layout
        self.retention = retention

    def keep(self, conversation: str, session_id: str, created: float, state_file: Path) -> bool:
        """The session's ``state.json`` becomes its conversation's, unless a newer session of the
        conversation saved one already (an older fork must not overwrite it). Never raises."""
        target = self.layout.conversation_file(conversation)
        held = read_json(target)
        if held is not None and held.get(OWNER) != session_id:
            newer = held.get(OWNER_CREATED)
            if isinstance(newer, int | float) and newer > created:
                return False
        try:
            text = state_file.read_text()
            if not text.rstrip().endswith("}"):
                return False
            owner = f', "{OWNER}": "{session_id}", "{OWNER_CREATED}": {created!r}}}'
            write_text(target, text.rstrip()[:-1] + owner)
        except OSError as exc:
            log.warning("conversation state not kept session=%s: %s", session_id, exc)
            return False
        return True

    def hand_to(self, conversation: str, session_dir: Path, state_name: str) -> bool:
        """Copies the conversation's state into a new session's directory; False when it has none
        (unknown, or older than the retention)."""
        source = self.layout.conversation_file(conversation)
        try:
            if time.time() - source.stat().st_mtime > self.retention:
                return False
            session_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, session_dir / state_name)
        except OSError:
            return False
        return True

    def prune(self) -> int:
        """Deletes the conversations nobody resumed within the retention; how many."""
        cutoff = time.time() - self.retention
        gone = 0
        with contextlib.suppress(OSError), os.scandir(self.layout.conversations_dir) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        gone += 1
        return gone
