"""Errors the catalog answers with, and the opaque cursors of its paginated lists."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, Final, TypeVar

from router.errors import INVALID_PARAMS

RESOURCE_NOT_FOUND: Final = -32002  # MCP: resources/read of an unknown URI
PAGE_SIZE: Final = 50
_CURSOR_PREFIX: Final = "o:"

T = TypeVar("T")


class CatalogError(Exception):
    """Answered to the client as a JSON-RPC error (the HTTP status stays 200)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def error(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            body["data"] = self.data
        return body


def invalid_params(message: str) -> CatalogError:
    return CatalogError(INVALID_PARAMS, message)


def _offset(cursor: Any) -> int:
    if cursor is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(str(cursor).encode()).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        text = ""
    if not text.startswith(_CURSOR_PREFIX) or not text[len(_CURSOR_PREFIX):].isdigit():
        raise invalid_params("Invalid params: unknown cursor")
    return int(text[len(_CURSOR_PREFIX):])


def page(items: Sequence[T], cursor: Any, size: int = PAGE_SIZE) -> tuple[list[T], str | None]:
    """One page of ``items`` from ``cursor`` (a previous ``nextCursor``) and the next cursor."""
    start = _offset(cursor)
    end = start + size
    following = base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{end}".encode()).decode() if end < len(items) else None
    return list(items[start:end]), following
