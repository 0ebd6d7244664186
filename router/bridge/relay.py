"""Messages between a stdio MCP client and the router, both ways, without knowing their methods.

Requests run concurrently (a long tool call must not hold up a ping or a roots/list answer);
notifications and responses go in order, each POST answered at once with 202. After the client's
``notifications/initialized`` the router's GET stream is held, so whatever the router (or the
worker behind it) asks or announces on it reaches the client: roots/list, pings, elicitation,
list_changed. When stdin ends, the session is DELETEd.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable
from typing import Any, Final, Protocol

import anyio
import httpx
import mcp_types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from router.bridge.upstream import RouterLink, RouterRefused
from router.errors import INTERNAL_ERROR, PARSE_ERROR
from router.types import JsonObject, JsonRpcId

log = logging.getLogger("mcp_router.stdio")

INITIALIZE: Final = "initialize"
INITIALIZED: Final = "notifications/initialized"
STREAM_RETRY_DELAY: Final = 1.0  # before reopening a GET stream the router ended
STREAM_GONE: Final = frozenset({404, 405})  # the session is gone, or the router offers no GET stream


class Sink(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


class Relay:
    def __init__(self, link: RouterLink, out: Sink) -> None:
        self._link = link
        self._out = out
        self._listening = False

    async def run(self, inbound: AsyncIterable[SessionMessage | Exception]) -> None:
        """Forward until the client's messages end, then end the session at the router."""
        try:
            async with anyio.create_task_group() as tasks:
                async for item in inbound:
                    if isinstance(item, Exception):
                        # No id could be read: JSON-RPC answers such a line with id null.
                        log.warning("a line that is not a JSON-RPC message: %s", str(item).splitlines()[0])
                        await self._write(_error(None, "Parse error: not a JSON-RPC message", PARSE_ERROR))
                        continue
                    message = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                    if "method" in message and "id" in message:
                        if self._link.session_id is None:
                            await self._request(message)  # initialize: its answer names the session
                        else:
                            tasks.start_soon(self._request, message)
                    else:
                        await self._deliver(message)
                        if message.get("method") == INITIALIZED and not self._listening:
                            self._listening = True
                            tasks.start_soon(self._listen)
                tasks.cancel_scope.cancel()  # stdin ended: nobody is left to read the answers
        finally:
            with anyio.CancelScope(shield=True):
                await self._link.delete()

    async def _request(self, message: JsonObject) -> None:
        request_id: JsonRpcId = message["id"]
        answered = False
        try:
            async for answer in self._link.post(message):
                if answer.get("id") == request_id and "method" not in answer:
                    answered = True
                    if message.get("method") == INITIALIZE:
                        self._note_version(answer)
                        log.info("router session %s", self._link.session_id)
                await self._write(answer)
        except RouterRefused as exc:
            await self._write(_refusal(exc, request_id))
            return
        except httpx.HTTPError as exc:
            await self._write(_error(request_id, f"the router did not answer: {exc!r}"))
            return
        if not answered:  # the stream ended without the answer: the client must not wait forever
            await self._write(_error(request_id, "the router ended the answer without a result"))

    async def _deliver(self, message: JsonObject) -> None:
        """A notification, or the client's answer to a request from the router: 202, no body."""
        try:
            async for stray in self._link.post(message):
                await self._write(stray)
        except RouterRefused as exc:
            log.warning("the router refused %s: %s %s", message.get("method", "a response"), exc.status, exc.body)
        except httpx.HTTPError as exc:
            log.warning("could not forward %s: %r", message.get("method", "a response"), exc)

    async def _listen(self) -> None:
        while True:
            try:
                async for event in self._link.listen():
                    await self._write(event)
            except RouterRefused as exc:
                if exc.status in STREAM_GONE:
                    log.warning("the router's stream is closed for good (%s)", exc.status)
                    return
                log.warning("the router refused its stream (%s); retrying", exc.status)
            except httpx.HTTPError as exc:
                log.warning("the router's stream broke (%r); reopening", exc)
            await anyio.sleep(STREAM_RETRY_DELAY)

    def _note_version(self, answer: JsonObject) -> None:
        result = answer.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, str):
            self._link.protocol_version = version

    async def _write(self, message: JsonObject) -> None:
        try:
            parsed = mcp_types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except ValidationError as exc:
            log.warning("dropping a message from the router that is not JSON-RPC: %s", exc)
            return
        await self._out.send(SessionMessage(parsed))


def _error(request_id: JsonRpcId, text: str, code: int = INTERNAL_ERROR) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}


def _refusal(exc: RouterRefused, request_id: JsonRpcId) -> JsonObject:
    """The router's own JSON-RPC error (its code tells e.g. a 2026 client to fall back), for this id."""
    error: Any = exc.body.get("error") if exc.body is not None else None
    if isinstance(error, dict):
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    return _error(request_id, f"the router answered {exc.status}")
