"""What a POST to /mcp must say of its media types: a JSON body, and an answer it can read (JSON
and SSE). The endpoint refuses what fails (415, 406)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["accepts", "media_type"]


def media_type(headers: Mapping[str, str]) -> str:
    """The Content-Type without its parameters, lower-cased ("" when there is none)."""
    return headers.get("content-type", "").split(";")[0].strip().lower()


def accepts(headers: Mapping[str, str], *types: str) -> bool:
    """Whether the Accept header takes every one of ``types`` (itself, ``type/*`` or ``*/*``)."""
    accept = headers.get("accept", "")
    offered = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    if "*/*" in offered:
        return True
    return all(t in offered or f"{t.split('/')[0]}/*" in offered for t in types)
