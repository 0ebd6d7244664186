"""Arguments checked before anything is sent, so a mistake gets a clear message at once instead
of a worker's error (or a browser sent somewhere odd) a round trip later."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from pydantic import ValidationError

from router.client._exceptions import InvalidArgument
from router.client.models import FormField

MIN_TIMEOUT: Final = 0.001  # 1 ms
MAX_TIMEOUT: Final = 600.0  # 10 min: a call that needs longer is a stuck call
# The worker's own names; "warn" is accepted too, as the router's get_console_content spells it.
CONSOLE_LEVELS: Final = {"debug": "debug", "info": "info", "warn": "warning", "warning": "warning", "error": "error"}


def timeout(value: float, *, what: str = "timeout") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not MIN_TIMEOUT <= value <= MAX_TIMEOUT:
        raise InvalidArgument(
            f"{what} must be a number of seconds from {MIN_TIMEOUT} to {MAX_TIMEOUT:g}, got {value!r}"
        )
    return float(value)


def endpoint(url: str) -> str:
    """The router's endpoint: an absolute http(s) URL (``http://127.0.0.1:4000/mcp``)."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidArgument(f"the router's URL must be absolute http:// or https://, got {url!r}")
    return url


def page_url(url: str) -> str:
    """A page to open: absolute http(s) with a host, or an ``about:`` page."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument(f"navigate needs a URL, got {url!r}")
    parts = urlsplit(url.strip())
    if parts.scheme == "about" and parts.path:
        return url.strip()
    if parts.scheme in ("http", "https") and parts.hostname:
        return url.strip()
    hint = " (no scheme: add http:// or https://)" if not parts.scheme else ""
    raise InvalidArgument(f"navigate needs an absolute http(s):// or about: URL, got {url!r}{hint}")


def non_empty(value: str, *, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{what} must be a non-empty string, got {value!r}")
    return value.strip()


def console_level(level: str) -> str:
    if level not in CONSOLE_LEVELS:
        raise InvalidArgument(f"console level must be one of {', '.join(CONSOLE_LEVELS)}, got {level!r}")
    return CONSOLE_LEVELS[level]


def form_fields(fields: Iterable[FormField | Mapping[str, Any]]) -> list[dict[str, Any]]:
    checked: list[dict[str, Any]] = []
    for i, field in enumerate(fields):
        try:
            item = field if isinstance(field, FormField) else FormField.model_validate(field)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'field'}: {e['msg']}" for e in exc.errors())
            raise InvalidArgument(f"fill_form field {i}: {problems}") from None
        if not item.target.strip():
            raise InvalidArgument(f"fill_form field {i} ({item.name!r}): target must be a non-empty ref")
        checked.append(item.argument())
    if not checked:
        raise InvalidArgument("fill_form needs at least one field")
    return checked
