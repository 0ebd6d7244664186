"""The router's side of the bridge: one Streamable-HTTP session, message by message.

It knows nothing of MCP methods: it POSTs a JSON-RPC message and yields whatever the router answers
(a JSON body, or each SSE event's data), holds the GET stream, and DELETEs the session.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Final

import httpx

from router.protocol.sse import EventSplitter, event_data, event_id
from router.types import H_CONVERSATION, H_PROTOCOL_VERSION, H_SESSION_ID, JsonObject

log = logging.getLogger("mcp_router.stdio")

ACCEPT_BOTH: Final = "application/json, text/event-stream"
H_LAST_EVENT_ID: Final = "last-event-id"
CONNECT_TIMEOUT: Final = 5.0
# No read timeout: a tool call takes as long as it takes, and the GET stream is silent between events.
HTTP_TIMEOUT: Final = httpx.Timeout(None, connect=CONNECT_TIMEOUT)
DELETE_TIMEOUT: Final = 1.5  # the SDK's stdio client waits 2 s after closing stdin before SIGTERM


class RouterRefused(Exception):
    """The router answered with an error status; ``body`` is its JSON-RPC error, when it sent one."""

    def __init__(self, status: int, body: JsonObject | None) -> None:
        super().__init__(f"router answered {status}")
        self.status = status
        self.body = body


class RouterLink:
    """One router session over ``client``. The session id comes from the first answer that
    carries one (the initialize answer); the protocol version is set by whoever reads it."""

    def __init__(
        self, client: httpx.AsyncClient, url: str, token: str | None, *, conversation: str | None = None
    ) -> None:
        """``conversation``: the key of the conversation this session continues, sent on ``initialize``."""
        self._client = client
        self._url = url
        self._token = token
        self._conversation = conversation
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._last_event_id: str | None = None

    def _headers(self, accept: str) -> dict[str, str]:
        headers = {"accept": accept}
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        if self.session_id is not None:
            headers[H_SESSION_ID] = self.session_id
        if self.protocol_version is not None:
            headers[H_PROTOCOL_VERSION] = self.protocol_version
        return headers

    async def post(self, message: JsonObject) -> AsyncIterator[JsonObject]:
        """POST one message; yields the messages of the answer (none for a 202)."""
        headers = self._headers(ACCEPT_BOTH) | {"content-type": "application/json"}
        if self._conversation and self.session_id is None and message.get("method") == "initialize":
            headers[H_CONVERSATION] = self._conversation
        body = json.dumps(message).encode()
        async with self._client.stream("POST", self._url, content=body, headers=headers) as response:
            if self.session_id is None and H_SESSION_ID in response.headers:
                self.session_id = response.headers[H_SESSION_ID]
            if response.status_code >= 400:
                raise RouterRefused(response.status_code, _json_object(await response.aread()))
            async for answer in _messages(response):
                yield answer

    async def listen(self) -> AsyncIterator[JsonObject]:
        """The session's GET stream, until the router ends it; raises RouterRefused when refused."""
        headers = self._headers("text/event-stream")
        if self._last_event_id is not None:
            headers[H_LAST_EVENT_ID] = self._last_event_id
        async with self._client.stream("GET", self._url, headers=headers) as response:
            if response.status_code >= 400:
                raise RouterRefused(response.status_code, _json_object(await response.aread()))
            async for answer in _messages(response, self):
                yield answer

    def remember_event(self, event: bytes) -> None:
        ident = event_id(event)
        if ident:
            self._last_event_id = ident

    async def delete(self) -> None:
        """End the session at the router (best effort: idle reaping ends it otherwise)."""
        if self.session_id is None:
            return
        try:
            await self._client.delete(self._url, headers=self._headers(ACCEPT_BOTH), timeout=DELETE_TIMEOUT)
        except httpx.HTTPError as exc:
            log.warning("could not end the session at the router: %s", exc)


async def _messages(response: httpx.Response, link: RouterLink | None = None) -> AsyncIterator[JsonObject]:
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        answer = _json_object(await response.aread())
        if answer is not None:
            yield answer
        return
    if not content_type.startswith("text/event-stream"):
        return
    splitter = EventSplitter()
    async for chunk in response.aiter_bytes():
        for event in splitter.feed(chunk):
            if link is not None:
                link.remember_event(event)
            data = event_data(event)
            answer = _json_object(data) if data else None
            if answer is not None:
                yield answer


def _json_object(raw: bytes) -> JsonObject | None:
    try:
        value: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None
