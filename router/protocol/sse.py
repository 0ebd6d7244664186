"""Server-sent events on the wire: split a byte stream into whole events, and keep idle streams alive."""

from __future__ import annotations

import json
from typing import Any, Final

KEEPALIVE_COMMENT = b": keep-alive\n\n"
_PLAIN_EVENT: Final = b"event: message\ndata: "
_PLAIN_EVENT_CRLF: Final = _PLAIN_EVENT.replace(b"\n", b"\r\n")
_BOUNDARIES: Final = (b"\n\n", b"\r\n\r\n", b"\r\r")
# One event (a tool's answer, with its base64 screenshots) is held whole before it is forwarded;
# past this it would only grow the router's memory, so the event is refused instead.
MAX_EVENT_BYTES: Final = 16 * 1024 * 1024


class EventTooLarge(Exception):
    """An event grew past the splitter's maximum. The event is dropped (the splitter skips to its
    end); ``events`` holds the whole events that came before it in the same ``feed``, which the
    caller may still forward. Bytes after the dropped event stay buffered: ``feed(b"")`` returns
    the events among them."""

    def __init__(self, size: int, limit: int, events: list[bytes]) -> None:
        super().__init__(f"server-sent event of {size}+ bytes exceeds the {limit}-byte limit")
        self.size = size
        self.limit = limit
        self.events = events


class EventSplitter:
    """Cuts a stream of chunks at event boundaries, so nothing is ever inserted mid-event.

    Linear in its input: each separator's search resumes where the last one stopped, so an event
    fed in many small chunks is scanned once, not once per chunk (``bytes_scanned`` counts it).
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.bytes_scanned = 0
        self._empty()

    def _empty(self) -> None:
        self._buffer = bytearray()
        # Per separator: the next occurrence found (-1: none up to _seen, the buffer's length when
        # it was last searched), and where its search resumes.
        self._hit = [-1] * len(_BOUNDARIES)
        self._seen = [0] * len(_BOUNDARIES)
        self._resume = [0] * len(_BOUNDARIES)
        self._skipping = False  # inside an event already refused: drop bytes up to its end

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events: list[bytes] = []
        start = 0
        try:
            while True:
                cut = self._next_boundary(start)
                if cut < 0:
                    break
                size, skipped = cut - start, self._skipping
                if not skipped and size <= self.max_event_bytes:
                    events.append(bytes(self._buffer[start:cut]))
                start, self._skipping = cut, False
                if not skipped and size > self.max_event_bytes:
                    raise EventTooLarge(size, self.max_event_bytes, events)
            pending = len(self._buffer) - start
            if self._skipping or pending > self.max_event_bytes:
                # Keep only what could begin a boundary that the next chunk completes.
                keep = max(len(sep) for sep in _BOUNDARIES) - 1
                was_skipping, self._skipping = self._skipping, True
                start = max(start, len(self._buffer) - keep)
                if not was_skipping:
                    raise EventTooLarge(pending, self.max_event_bytes, events)
            return events
        finally:
            self._compact(start)

    def rest(self) -> bytes:
        rest = b"" if self._skipping else bytes(self._buffer)
        self._empty()
        return rest

    def _next_boundary(self, start: int) -> int:
        """The end of the earliest-ending boundary at or after ``start``, or -1."""
        best = -1
        end = len(self._buffer)
        for i, sep in enumerate(_BOUNDARIES):
            at = self._hit[i]
            if at < start and not (at < 0 and self._seen[i] == end):
                origin = max(self._resume[i], start)
                at = self._buffer.find(sep, origin)
                self.bytes_scanned += (at + len(sep) if at >= 0 else end) - origin
                self._hit[i] = at
                self._seen[i] = end
                # Without a hit, a later search only needs the tail a separator could start in.
                self._resume[i] = at if at >= 0 else max(start, end - len(sep) + 1)
            if at >= 0 and (best < 0 or at + len(sep) < best):
                best = at + len(sep)
        return best

    def _compact(self, start: int) -> None:
        if start == 0:
            return
        del self._buffer[:start]
        # A consumed hit says nothing about what follows it: seen = -1 forces a new search.
        self._seen = [seen - start if at < 0 else (-1 if at < start else 0)
                      for at, seen in zip(self._hit, self._seen, strict=True)]
        self._hit = [at - start if at >= start else -1 for at in self._hit]
        self._resume = [max(at - start, 0) for at in self._resume]


def event_data(event: bytes) -> bytes | None:
    """The joined `data:` lines of one event, or None for comments and data-less events."""
    lines = event.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    data = [
        line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")
    ]
    return b"\n".join(data) if data else None


def event_id(event: bytes) -> str | None:
    for line in event.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"id:"):
            return line[3:].strip().decode("utf-8", "replace")
    return None


def event_json(event: bytes) -> Any:
    data = event_data(event)
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def lone_event_data(data: bytes) -> bytes | None:
    """The data of ``data`` when it is exactly one event as ``encode_event`` writes it without an
    id (one ``message`` event, one data line: how a worker's answer usually comes), or the same
    with CRLF line ends (how the MCP python-sdk's servers write it), else None."""
    if data.startswith(_PLAIN_EVENT) and data.endswith(b"\n\n"):
        payload = data[len(_PLAIN_EVENT):-2]
    elif data.startswith(_PLAIN_EVENT_CRLF) and data.endswith(b"\r\n\r\n"):
        payload = data[len(_PLAIN_EVENT_CRLF):-4]
    else:
        return None
    return payload if b"\n" not in payload and b"\r" not in payload else None


def encode_event(payload: bytes, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n".encode() if event_id else b""
    return head + _PLAIN_EVENT + payload + b"\n\n"
