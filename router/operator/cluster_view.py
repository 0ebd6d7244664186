"""GET /api/cluster/sessions: every node's sessions, for the dashboard of a cluster (--cluster-node).

Each node keeps its own record and nothing is shared, so the node that serves the dashboard asks
each listed node's /api/sessions (read-only, with this node's token: a cluster shares one) and
merges the rows, each with ``node`` (the URL it came from); a node that does not answer is listed
under ``missing`` instead of being left out silently. Not configured: ``{"configured": false}``
(not a 404, which a browser logs as an error), and the dashboard shows this node's sessions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from router.api_client import fetch_live_sessions_at

NODE_TIMEOUT: Final = 5.0  # across a network, and a busy node; a caller still must not hang


class ClusterView:
    def __init__(self, nodes: Sequence[str], token: str | None, node_id: str | None) -> None:
        self.nodes = [url.rstrip("/") for url in nodes]
        self.token = token
        self.node_id = node_id

    def routes(self) -> list[Route]:
        return [Route("/api/cluster/sessions", self.sessions, methods=["GET"])]

    async def sessions(self, request: Request) -> Response:
        if not self.nodes:
            return JSONResponse({"configured": False, "node": self.node_id})
        # Blocking httpx calls with short timeouts, off the event loop.
        rows, missing = await anyio.to_thread.run_sync(cluster_sessions, self.nodes, self.token)
        return JSONResponse({
            "configured": True, "sessions": rows, "missing": missing, "node": self.node_id, "now": time.time(),
        })


def cluster_sessions(urls: Sequence[str], token: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every node's rows (each with ``node``: its URL), most recent first, and the nodes that did
    not answer (down, or the token is not theirs)."""
    rows: list[dict[str, Any]] = []
    missing: list[str] = []
    for url in urls:
        found = fetch_live_sessions_at(url, token=token, timeout=NODE_TIMEOUT)
        if found is None:
            missing.append(url)
            continue
        rows += [{**row, "node": url} for row in found]
    rows.sort(key=lambda row: row.get("last_activity") or 0, reverse=True)
    return rows, missing
