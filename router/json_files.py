"""Small JSON files under the state directory, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_text(path, json.dumps(data))


def write_text(path: Path, text: str) -> None:
    """Atomic: a SIGKILL mid-write leaves the previous file, never half of one. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in the file; None when it is missing, unreadable or not a JSON object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: nested deeper than json can read
        return None
    return data if isinstance(data, dict) else None
