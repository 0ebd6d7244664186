"""The tests' own SSE reader (independent of router/http/sse.py, which is under test)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx


def sse_events(chunks: Iterable[str]) -> Iterator[dict[str, Any]]:
    """JSON-RPC messages of the ``data:`` events in ``chunks``; a comment-only event (a keepalive)
    comes as ``{"comment": text}``."""
    buffer = ""
    for chunk in chunks:
        buffer = (buffer + chunk).replace("\r\n", "\n")
        while "\n\n" in buffer:
            event, buffer = buffer.split("\n\n", 1)
            data = [line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")]
            if data:
                yield json.loads("\n".join(data))
            elif event.startswith(":"):
                yield {"comment": event}


def iter_sse(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Events of a streamed response as they arrive, keepalive comments included."""
    return sse_events(response.iter_text())


def sse_messages(body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a whole SSE body."""
    # A body read whole may end without the blank line after its last event.
    return [m for m in sse_events([body, "\n\n"]) if "comment" not in m]


def messages_of(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an answer read whole, whether JSON or SSE."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return sse_messages(response.text)
    return [response.json()]
