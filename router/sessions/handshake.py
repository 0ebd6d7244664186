"""What the pinned worker answers to ``initialize`` and ``tools/list``, so the router can answer them.

Claude Code connects to every configured server when a conversation or a subagent starts (and
``claude mcp list`` connects to health-check): most of those sessions never browse. The router
answers their handshake from this cache and spawns a worker only for the first request that
needs one (router/sessions/manager.py).

The cache is keyed by a fingerprint of the worker: its argv template and environment, the bytes
of every file the template names (the stand-in worker's script, the worker's entry point) and the
pinned package's lock, so a changed flag or version never serves a stale answer. Entries are per
requested protocol version, filled by a probe worker at start (no browser is launched) or by the
first real spawn, and kept on disk in the state directory. Only the versions the router speaks
(``HANDSHAKE_VERSIONS``) have entries: a client may ask for any string, and the worker answers
one it does not know with a version it supports (MCP lifecycle), which such a session is spawned
for, never cached (the cache would grow by each client's string, its file rewritten whole).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from router.json_files import read_json, write_json
from router.sessions.control import ControlError, ControlSession
from router.types import HANDSHAKE_VERSIONS
from router.upstream.connection import WorkerConnection
from workers._exceptions import WorkerError
from workers.supervisor import Supervisor, Worker

if TYPE_CHECKING:
    from router.sessions.admission import Admission

log = logging.getLogger("mcp_router.handshake")

CACHE_DIR: Final = "cache"
PROBE_CLIENT_INFO: Final = {"name": "mcp-router-probe", "version": "1"}
MAX_HASHED_FILE: Final = 64 * 1024 * 1024


def _file_digest(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_HASHED_FILE:
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def worker_fingerprint(argv: Iterable[str], env: Mapping[str, str], files: Iterable[Path]) -> str:
    """Changes whenever the worker could answer its handshake differently."""
    digest = hashlib.sha256()
    digest.update(json.dumps([list(argv), sorted(env.items())]).encode())
    for path in files:
        digest.update(str(path).encode())
        digest.update((_file_digest(path) or "-").encode())
    return digest.hexdigest()


class HandshakeCache:
    def __init__(self, state_dir: Path, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self.path = state_dir / CACHE_DIR / f"handshake-{fingerprint[:32]}.json"
        self._entries: dict[str, dict[str, Any]] = {}
        self._loaded = False
        self._read_only: frozenset[str] | None = None

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        data = read_json(self.path)
        if data is not None and data.get("fingerprint") == self.fingerprint:
            entries = data.get("versions")
            if isinstance(entries, dict):
                self._entries = {k: v for k, v in entries.items() if k in HANDSHAKE_VERSIONS and _complete(v)}

    def get(self, version: str) -> dict[str, Any] | None:
        """``{"initialize": result, "tools": result}`` for a requested protocol version, or None.
        A copy: answers built from it are changed on their way out (the router's tools added)."""
        if version not in HANDSHAKE_VERSIONS:
            return None
        self._load()
        entry = self._entries.get(version)
        return None if entry is None else copy.deepcopy(entry)

    def read_only(self, tool: str) -> bool:
        """Whether the worker's cached tool list marks ``tool`` read-only (``readOnlyHint``); False
        for a tool it does not list, or with nothing cached."""
        self._load()
        if self._read_only is None:
            self._read_only = frozenset(
                t["name"]
                for entry in self._entries.values()
                for t in entry["tools"].get("tools", [])
                if _marked_read_only(t)
            )
        return tool in self._read_only

    def versions(self) -> set[str]:
        self._load()
        return set(self._entries)

    def wants(self, version: str) -> bool:
        """Whether an answer for ``version`` would be kept: one the router speaks, not cached yet."""
        if version not in HANDSHAKE_VERSIONS:
            return False
        self._load()
        return version not in self._entries

    def store(self, version: str, initialize: dict[str, Any], tools: dict[str, Any]) -> None:
        if version not in HANDSHAKE_VERSIONS:
            return
        self._load()
        entry = {"initialize": initialize, "tools": tools}
        if self._entries.get(version) == entry:
            return
        self._entries[version] = entry
        self._read_only = None
        data = {"fingerprint": self.fingerprint, "versions": self._entries}
        try:
            write_json(self.path, data)
        except OSError as exc:  # the cache is an optimisation: memory still has the entry
            log.warning("handshake cache not written (%s): %s", self.path, exc)


LEARN_TIMEOUT: Final = 5.0  # a wedged worker's tools/list is not worth waiting for


async def learn(cache: HandshakeCache, version: str, initialize: dict[str, Any], control: ControlSession) -> None:
    """Fills the cache for ``version`` (one it ``wants``) from a worker that just answered a
    client's ``initialize``: the worker's own tool list, asked by the router's session there."""
    with contextlib.suppress(ControlError), anyio.move_on_after(LEARN_TIMEOUT):
        cache.store(version, initialize, await control.list_tools())


def _marked_read_only(tool: Any) -> bool:
    annotations = tool.get("annotations") if isinstance(tool, dict) else None
    return isinstance(annotations, dict) and annotations.get("readOnlyHint") is True and "name" in tool


def _complete(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("initialize"), dict)
        and isinstance(entry.get("tools"), dict)
        and isinstance(entry["tools"].get("tools"), list)
    )


async def fill_cache(cache: HandshakeCache, worker: Worker, versions: Iterable[str]) -> None:
    """The missing versions' answers, from a worker no client uses (it launches no browser: only
    tool calls do). Raises ControlError."""
    connection = WorkerConnection(worker)
    try:
        for version in sorted(set(versions) - cache.versions()):
            probe = ControlSession(connection)
            await probe.open({"protocolVersion": version, "capabilities": {}, "clientInfo": PROBE_CLIENT_INFO})
            cache.store(version, probe.initialize_result, await probe.list_tools())
            await probe.close()
    finally:
        await connection.aclose()


async def probe(
    cache: HandshakeCache, versions: Iterable[str], *, supervisor: Supervisor, admission: Admission, worker_id: str
) -> None:
    """Fills the cache from a worker of its own (``worker_id``; it launches no browser), then
    ends it. A failure is logged: sessions then start their workers at once."""
    if not admission.try_admit(worker_id):
        return
    started = time.monotonic()
    try:
        # Straight to the supervisor: a probe is not a session's spawn (metrics, failure memory).
        worker = await supervisor.spawn(worker_id)
        await fill_cache(cache, worker, versions)
        log.info("handshake cache filled ms=%.0f", (time.monotonic() - started) * 1000)
    except (ControlError, WorkerError) as exc:
        log.warning("handshake probe failed (sessions start their workers at once): %s", exc)
    finally:
        with anyio.CancelScope(shield=True):
            await supervisor.forget(worker_id)
        admission.release(worker_id)
