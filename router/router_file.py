"""``router.json`` in the state dir: where a running router listens, written for as long as it runs,
so the CLI on the same machine finds it (``mcp-router sessions``, ``--end``)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from router.api_client import base_url
from router.layout import StateLayout

__all__ = ["router_file", "running_router"]


@contextmanager
def router_file(layout: StateLayout, host: str, port: int) -> Iterator[None]:
    """Says where this router listens, for as long as it runs."""
    path = layout.router_file
    path.write_text(json.dumps({"pid": os.getpid(), "url": base_url(host, port), "started": time.time()}))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def running_router(state_dir: Path) -> str | None:
    try:
        data = json.loads(StateLayout(state_dir).router_file.read_text())
        os.kill(int(data["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no file, or its router died without removing it (SIGKILL)
    url = data.get("url")
    return url if isinstance(url, str) else None
