"""Type aliases and the protocol's names, shared by the router's modules."""

from __future__ import annotations

from typing import Any, Final

JsonRpcId = str | int | None
JsonObject = dict[str, Any]

MCP_ENDPOINT: Final = "/mcp"
HEALTHZ_PATH: Final = "/healthz"
METRICS_PATH: Final = "/metrics"

# Header names, lower-case as ASGI delivers them.
H_SESSION_ID: Final = "mcp-session-id"
H_PROTOCOL_VERSION: Final = "mcp-protocol-version"
H_CONTENT_LENGTH: Final = "content-length"
# Names the conversation a new session continues (on initialize): its browser comes back.
H_CONVERSATION: Final = "mcp-router-conversation"
# The operator API's actions (end, hibernate) need it: a cross-site page cannot send it unpreflighted.
ACTION_HEADER: Final = "x-mcp-router-action"

# The router's id for one recorded call, in each tools/call answer's `_meta` (get_content reads it).
REF_META_KEY: Final = "mcp-router/refId"

JSON: Final = "application/json"
SSE: Final = "text/event-stream"

# Either side's word that it gave up on a request it sent (params.requestId names it).
CANCELLED: Final = "notifications/cancelled"

# Revisions with a session handshake; 2026-07-28 is sessionless and is answered with 400 so
# clients fall back to initialize.
HANDSHAKE_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})

# Streaming headers every SSE answer carries, so no proxy in between buffers or compresses it.
SSE_HEADERS: Final = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
)
