"""Server-sent events on the wire: split a byte stream into whole events, and keep idle streams alive."""

from __future__ import annotations

import json
from typing import Any

KEEPALIVE_COMMENT = b": keep-alive\n\n"
_BOUNDARIES = (b"\n\n", b"\r\n\r\n", b"\r\r")


class EventSplitter:
    """Cuts a stream of chunks at event boundaries, so nothing is ever inserted mid-event."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events: list[bytes] = []
        while True:
            cut = self._next_boundary()
            if cut < 0:
                return events
            events.append(bytes(self._buffer[:cut]))
            del self._buffer[:cut]

    def rest(self) -> bytes:
        rest, self._buffer = bytes(self._buffer), bytearray()
        return rest

    def _next_boundary(self) -> int:
        best = -1
        for sep in _BOUNDARIES:
            at = self._buffer.find(sep)
            if at >= 0 and (best < 0 or at + len(sep) < best):
                best = at + len(sep)
        return best


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


def encode_event(payload: bytes, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n".encode() if event_id else b""
    return head + b"event: message\ndata: " + payload + b"\n\n"
