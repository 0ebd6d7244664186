"""Every path under the state directory, in one place.

    <state>/router.db                 the record (SQLite)
    <state>/router.json               where the running router listens (CLI → running router)
    <state>/sessions/<id>/            one session: session.json, state.json, profile/, out/
    <state>/workers/<id>.json         pid files of live workers (workers/orphans.py)
    <state>/files/<ref_id>/<name>     files a recorded call linked (screenshots, pdfs), kept with
                                      its row so that they outlive the worker's output dir
    <state>/prompts/*.toml            the operator's own MCP prompts (router/catalog/prompts.py)
    <state>/cache/handshake-*.json    the worker's cached handshake (router/sessions/handshake.py)
    <state>/cache/node-compile/       V8's compile cache, shared by every worker (workers/node.py)

``workers/`` computes the session, output, profile, pid and compile cache paths itself (it must not import the
router); tests/unit/router/test_layout.py checks that both agree.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DB_NAME: Final = "router.db"
ROUTER_FILE: Final = "router.json"
SESSIONS: Final = "sessions"
CONVERSATIONS: Final = "conversations"
WORKERS: Final = "workers"
FILES: Final = "files"
PROMPTS: Final = "prompts"
CACHE: Final = "cache"
NODE_COMPILE_CACHE: Final = "node-compile"
OUTPUT: Final = "out"
PROFILE: Final = "profile"
SESSION_FILE: Final = "session.json"
STATE_FILE: Final = "state.json"

# Session ids are minted URL-safe base64, ref_ids UUIDs; a client-chosen id could be anything, so
# a name that would leave its directory ("..", "/") never becomes a path.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


SESSION_TAG_CHARS: Final = 16


def session_tag(session_id: str) -> str:
    """A session's name in files several sessions see (a shared worker's output dir): never the
    id itself, which is a bearer secret."""
    return hashlib.sha256(session_id.encode()).hexdigest()[:SESSION_TAG_CHARS]


OWN_FOLDER_PREFIX: Final = "s-"


def own_folder(output_dir: Path, session_id: str) -> Path:
    """A session's folder in a shared worker's output dir: its named files go there."""
    return output_dir / f"{OWN_FOLDER_PREFIX}{session_tag(session_id)}"


def _checked(name: str) -> str:
    if not _SAFE_NAME.fullmatch(name) or name.startswith(".."):
        raise ValueError(f"not a usable path component: {name!r}")
    return name


@dataclass(frozen=True)
class StateLayout:
    root: Path

    @property
    def db(self) -> Path:
        return self.root / DB_NAME

    @property
    def router_file(self) -> Path:
        return self.root / ROUTER_FILE

    @property
    def sessions_root(self) -> Path:
        return self.root / SESSIONS

    @property
    def workers_dir(self) -> Path:
        """Pid files of live workers."""
        return self.root / WORKERS

    @property
    def files_root(self) -> Path:
        return self.root / FILES

    @property
    def prompts_dir(self) -> Path:
        """The operator's own prompt files (router/catalog/prompts.py), beside the built-in ones."""
        return self.root / PROMPTS

    @property
    def node_compile_cache(self) -> Path:
        """NODE_COMPILE_CACHE of every worker: V8's code for the worker's modules, kept across starts."""
        return self.root / CACHE / NODE_COMPILE_CACHE

    def session_dir(self, session_id: str) -> Path:
        return self.sessions_root / _checked(session_id)

    def output_dir(self, session_id: str) -> Path:
        """The worker's --output-dir (and cwd): snapshots, console logs, screenshots."""
        return self.session_dir(session_id) / OUTPUT

    def profile_dir(self, session_id: str) -> Path:
        return self.session_dir(session_id) / PROFILE

    def state_file(self, session_id: str) -> Path:
        return self.session_dir(session_id) / STATE_FILE

    @property
    def conversations_dir(self) -> Path:
        """Each conversation's browser state, by its hashed key (router/sessions/conversations.py)."""
        return self.root / CONVERSATIONS

    def conversation_file(self, conversation: str) -> Path:
        return self.conversations_dir / f"{_checked(conversation)}.json"

    def files_dir(self, ref_id: str) -> Path:
        """The files kept for one recorded call."""
        return self.files_root / _checked(ref_id)
