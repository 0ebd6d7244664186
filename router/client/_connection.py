"""One MCP session with the router, through the `mcp` SDK's Streamable HTTP client.

`BrowserSession` imports this module only when it opens, so ``import router.client`` stays cheap
(the SDK takes a second or more to import).

The SDK turns every HTTP error into a JSON-RPC error and forgets the status and headers, and a
refused connection escapes its transport's task group and tears the connection down. `_Watch`, a
wrapper around the HTTP transport, keeps both for the call that caused them: it notes each
error status and ``Retry-After`` in the calling task's `CallOutcome` (a context variable: the
SDK sends each request from a copy of its caller's context), and answers a failed connection as
a router would (502, JSON-RPC error), so that only the one call fails.
"""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx2
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, Implementation

from router.client._exceptions import (
    CallTimeout,
    ConnectionFailed,
    RequestRejected,
    RouterError,
    ServiceBusy,
    SessionExpired,
)
from router.types import H_SESSION_ID

CLIENT_NAME: Final = "mcp-router-client"
CONNECT_TIMEOUT: Final = 10.0
WRITE_TIMEOUT: Final = 30.0
# The SDK bounds each call (the caller's timeout); a read timeout would also cut the idle GET stream.
HTTP_TIMEOUT: Final = httpx2.Timeout(CONNECT_TIMEOUT, read=None, write=WRITE_TIMEOUT, pool=CONNECT_TIMEOUT)
DELETE_TIMEOUT: Final = 10.0
BUSY_STATUSES: Final = frozenset({429, 503})
_INTERNAL_ERROR: Final = -32603


@dataclass
class CallOutcome:
    """What the HTTP layer saw while one call (or the handshake) was in flight."""

    status: int | None = None
    retry_after: float | None = None
    failure: httpx2.TransportError | None = None


_OUTCOME: ContextVar[CallOutcome | None] = ContextVar("router_client_outcome", default=None)


class _Watch(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport | None) -> None:
        self._owned = inner is None  # a caller's transport may serve the next session too
        self._inner = inner or httpx2.AsyncHTTPTransport()
        self.session_id: str | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        outcome = _OUTCOME.get()
        if request.method != "POST" or outcome is None:  # the GET stream and DELETE: the SDK copes
            return await self._inner.handle_async_request(request)
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            outcome.failure = exc
            error = {"code": _INTERNAL_ERROR, "message": f"{type(exc).__name__}: {exc}"}
            return httpx2.Response(502, json={"jsonrpc": "2.0", "id": None, "error": error}, request=request)
        if response.status_code >= 400:
            outcome.status = response.status_code
            outcome.retry_after = retry_after_seconds(response.headers.get("retry-after"))
        elif session_id := response.headers.get(H_SESSION_ID):
            self.session_id = session_id
        return response

    async def aclose(self) -> None:
        if self._owned:
            await self._inner.aclose()


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: a number, or an HTTP date."""
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    with contextlib.suppress(TypeError, ValueError):
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    return None


class Connection:
    """One SDK client session. A task of the owner's task group opens and closes it: anyio's
    cancel scopes (the SDK's task groups) must be left by the task that entered them, and a
    re-initialize may happen in any task that called."""

    def __init__(
        self, url: str, *, headers: dict[str, str], timeout: float, end_on_close: bool,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self._watch = _Watch(transport)
        self._http = httpx2.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT, transport=self._watch)
        self._timeout = timeout
        self._end_on_close = end_on_close
        self._client: Client | None = None
        self._closing = anyio.Event()
        self._closed = anyio.Event()

    @property
    def session_id(self) -> str | None:
        return self._watch.session_id

    async def open(self, tg: TaskGroup) -> None:
        """Initializes the session; RouterError when the router refuses or cannot be reached."""
        outcome = CallOutcome()
        token = _OUTCOME.set(outcome)
        try:
            await tg.start(self._hold)
        except Exception as exc:
            error = _leaf(exc)  # the SDK's task groups may wrap it
            if not isinstance(error, MCPError):
                raise
            raise self._error(error, outcome, what="initialize", timeout=self._timeout, connecting=True) from None
        finally:
            _OUTCOME.reset(token)

    async def close(self, *, end: bool = True) -> None:
        """Ends the SDK session, then the router's session (DELETE) unless ``end`` is false or the
        connection was made with ``end_on_close=False``."""
        self._end_on_close = self._end_on_close and end
        if self._client is None:
            await self._http.aclose()
            return
        self._closing.set()
        await self._closed.wait()

    async def call(self, tool: str, arguments: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """The tools/call result as JSON (``content``, ``isError``, ``_meta``)."""
        if self._client is None or self._closing.is_set():
            raise RuntimeError("the session is not open")
        outcome = CallOutcome()
        token = _OUTCOME.set(outcome)
        try:
            result = await self._client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            raise self._error(exc, outcome, what=tool, timeout=timeout, connecting=False) from None
        finally:
            _OUTCOME.reset(token)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def _hold(self, *, task_status: TaskStatus[None]) -> None:
        try:
            async with self._sdk_client() as client:
                self._client = client
                task_status.started()
                await self._closing.wait()
            if self._end_on_close and self.session_id:
                with contextlib.suppress(httpx2.HTTPError), anyio.move_on_after(DELETE_TIMEOUT):
                    await self._http.delete(self.url, headers={H_SESSION_ID: self.session_id})
        finally:
            await self._http.aclose()
            self._closed.set()

    @contextlib.asynccontextmanager
    async def _sdk_client(self) -> AsyncIterator[Client]:
        # Our own DELETE (above) so that a session the router already ended is not deleted again.
        transport = streamable_http_client(self.url, http_client=self._http, terminate_on_close=False)
        client = Client(
            transport, mode="legacy",  # the router is a session router: no server/discover probe
            read_timeout_seconds=self._timeout, client_info=Implementation(name=CLIENT_NAME, version="1"),
        )
        async with client:
            yield client

    def _error(
        self, exc: MCPError, outcome: CallOutcome, *, what: str, timeout: float, connecting: bool
    ) -> RouterError:
        where = f"{what} (router {self.url})"
        if outcome.failure is not None:
            return ConnectionFailed(f"{where}: cannot reach the router: {exc.message}")
        status = outcome.status
        if status == 404 and not connecting:
            return SessionExpired(
                f"{where}: the router no longer knows session {self.session_id} "
                f"(ended by DELETE or retention); open a new BrowserSession",
                session_id=self.session_id,
            )
        if status in BUSY_STATUSES:
            wait = "" if outcome.retry_after is None else f"; retry after {outcome.retry_after:g} s"
            return ServiceBusy(f"{where}: {exc.message}{wait}", status=status, retry_after=outcome.retry_after)
        if status is None and exc.code == REQUEST_TIMEOUT:
            return CallTimeout(f"{what}: no answer within {timeout:g} s", timeout=timeout)
        if status is None and exc.code == CONNECTION_CLOSED:
            return ConnectionFailed(f"{where}: the connection closed: {exc.message}")
        prefix = f"{where}: HTTP {status}" if status is not None else where
        return RequestRejected(f"{prefix}: {exc.message}", status=status, code=exc.code)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
