"""What the proxy tells the record: one queued item per call of these methods.

Each method fixes an item's kind and the layout of its data tuple, which ``rows.RowWriter.apply``
takes apart again, and guesses the bytes it holds in memory (the queue's byte bound). They are the
proxy's hot path: synchronous, no await, no disk, no exception (``_put``, the recorder's, sees to
the last).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from router.record import schema
from router.record.rows import approx_size

__all__ = ["RecordEnqueue"]

# Under the recorder's name, as in the record's other modules: one logger to set and filter for the record.
log = logging.getLogger("router.record.recorder")


class RecordEnqueue(abc.ABC):
    """The enqueue side of ``Recorder``: what a subclass queues through ``_put``."""

    @abc.abstractmethod
    def _put(self, kind: str, key: str, data: tuple[Any, ...], size: int, *, wake: bool = True) -> None:
        """Queue one item, ``size`` bytes held. Must never raise (the proxy path calls it).
        ``wake=False``: no batch of its own; it goes in the next (its answer's, at the latest)."""

    def session_opened(
        self, session_id: str, *, client_info: Mapping[str, Any] | None, protocol_version: str | None,
        port: int | None, pid: int | None, metadata: Mapping[str, Any] | None = None,
        parent_id: str | None = None, conversation: str | None = None,
    ) -> None:
        """A session got a worker (first spawn, or a respawn: port/pid are updated, state -> active)."""
        self._put(
            "open", session_id, (client_info, protocol_version, port, pid, metadata, parent_id, conversation),
            approx_size(client_info) + approx_size(metadata),
        )

    def session_state(self, session_id: str, state: str) -> None:
        """See the session states in router/record/schema.py."""
        self._put("state", session_id, (state,), 0)

    def session_resumed(self, session_id: str, reason: str) -> None:
        """The session got a worker again; ``reason`` is one of schema.RESUME_REASONS ("idle",
        "crash", "hibernation", "router-restart", "new-browser"). Kept as a session event."""
        if reason not in schema.RESUME_REASONS:
            log.warning("recorder: unknown resume reason %r for session=%s", reason, session_id)
        self._put("resumed", session_id, (reason,), len(reason))

    def request(
        self, ref_id: str, session_id: str, method: str, tool: str | None, params: Any,
        *, size: int | None = None,
    ) -> None:
        """Every client->worker request. Also moves the session's last_activity (at most once a
        second, rows.ACTIVITY_EVERY_S). ``size``: the request's length on the wire when the
        caller knows it (spares measuring ``params``)."""
        held = approx_size(params) if size is None else size
        # Committed with its answer, which waits for it anyway: one commit per call, not two.
        self._put(
            "request", ref_id, (session_id, method, tool, params), held + len(method) + len(tool or ""), wake=False
        )

    def response(
        self, ref_id: str, *, status: str, result: Any, page_snapshot: str | None = None,
        console_logs: Sequence[str] | None = None, error: str | None = None, duration_ms: float,
        output_dir: Path | None = None, cwd: Path | None = None,
    ) -> None:
        """The answer to ``request(ref_id, ...)``. ``status`` is 'success' or 'error'.

        ``result``: the worker's JSON-RPC result/error as bytes or str (stored verbatim) or as the
        parsed object (JSON-encoded on the writer thread; do not mutate it afterwards).
        With ``output_dir`` (the worker's output dir) and no explicit snapshot/console, the writer
        thread extracts them from the answer, reading linked files inside that dir only.
        """
        size = approx_size(result) + approx_size(page_snapshot) + approx_size(console_logs)
        self._put(
            "response", ref_id,
            (status, result, page_snapshot, console_logs, error, duration_ms, output_dir, cwd),
            size + len(error or ""),
        )

