"""`mcp-router sessions --nodes URL,URL`: the whole cluster's sessions, read from each node's
/api (read-only). Each node keeps its own record; nothing is shared, so the view is assembled
here, and a node that does not answer is named rather than silently left out."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

from router.cli import admin, tables
from router.operator.cluster_view import cluster_sessions

TOKEN_ENV: Final = "MCP_ROUTER_TOKEN"  # else the local state dir's token: a cluster shares one
EXIT_PARTIAL: Final = 1


def parse_nodes(value: str) -> list[str]:
    urls = [url.strip().rstrip("/") for url in value.split(",") if url.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--nodes: {url!r} is not an http(s) URL")
    return urls


def show_cluster(nodes: str, state_dir: Path, limit: int) -> int:
    try:
        urls = parse_nodes(nodes)
    except ValueError as exc:
        print(f"mcp-router: {exc}", file=sys.stderr)
        return 2
    token = os.environ.get(TOKEN_ENV) or admin.state_dir_token(state_dir)
    rows, missing = cluster_sessions(urls, token)
    print(tables.format_sessions_table(rows[:limit]))
    for url in missing:
        print(f"mcp-router: node {url} did not answer (down, or another token): its sessions are not shown",
              file=sys.stderr)  # fmt: skip
    return EXIT_PARTIAL if missing else 0
