"""`BrowserSession`: one conversation's browser behind the router, with typed calls.

    async with BrowserSession("http://127.0.0.1:4000/mcp", token=token) as browser:
        page = await browser.navigate("https://example.com")
        snap = await browser.snapshot()
        await browser.click("More information link", snap.ref("More information"))

Each call has a timeout (30 s unless the session or the call says otherwise). Errors are the
`RouterError` tree (`router.client._exceptions`). On leaving, the session is ended (DELETE)
unless ``end_on_exit=False``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio

from router.client import _checks
from router.client._exceptions import ConnectionFailed, SessionExpired, ToolFailed
from router.client.models import (
    ConsoleMessages,
    Content,
    EvaluateResult,
    FormField,
    NavigateResult,
    PageResult,
    Screenshot,
    Snapshot,
    Tabs,
    ToolResult,
)
from router.types import H_CONVERSATION

if TYPE_CHECKING:
    import httpx2
    from anyio.abc import TaskGroup

    from router.client._connection import Connection

DEFAULT_TIMEOUT: Final = 30.0
CLOSE_TIMEOUT: Final = 15.0  # closing the SDK session and the DELETE, even when the caller is cancelled
GET_CONTENT: Final = "get_content"  # router.record.tools answers it from the record
_R = TypeVar("_R", bound=ToolResult)


class BrowserSession:
    """An MCP session with the router (one browser), used as ``async with``.

    ``reinitialize_on_expiry``: when the router answers 404 (the session was ended by a DELETE,
    retention or an operator), open a new session once and repeat the call there, as Claude Code
    does. Off by default: the new session has a new, empty browser (no page, cookies or tabs),
    which a caller must expect. ``conversation``: a key naming the caller's conversation (the
    ``Mcp-Router-Conversation`` header): a later session with the same key starts from the browser
    this one leaves (page, cookies, storage, tabs). ``transport`` replaces the HTTP transport
    (tests use a stand-in).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        reinitialize_on_expiry: bool = False,
        end_on_exit: bool = True,
        conversation: str | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = _checks.endpoint(url)
        self.timeout = _checks.timeout(timeout)
        self.reinitialize_on_expiry = reinitialize_on_expiry
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        if conversation is not None:  # read by the router on initialize; any other request ignores it
            self._headers[H_CONVERSATION] = conversation
        self._end_on_exit = end_on_exit
        self._transport = transport
        self._tg: TaskGroup | None = None
        self._connection: Connection | None = None
        self._reopening = anyio.Lock()

    @property
    def session_id(self) -> str | None:
        """The router's id for this session (``Mcp-Session-Id``); it changes on a re-initialize."""
        return self._connection.session_id if self._connection else None

    async def __aenter__(self) -> BrowserSession:
        # The task group hosts the connection's task; it is left without the body's exception
        # (after the connection is closed), so that exception reaches the caller unwrapped.
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            self._connection = await self._open()
        except BaseException:
            self._tg = None
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
                await self._close()
        finally:
            tg.cancel_scope.cancel()  # whatever did not close in time
            try:
                await tg.__aexit__(None, None, None)
            except BaseExceptionGroup as group:  # the connection's task failed (the SDK's transport)
                failures = group.subgroup(lambda e: not isinstance(e, anyio.get_cancelled_exc_class()))
                if failures is None:
                    raise
                first = failures.exceptions[0]
                raise ConnectionFailed(f"the connection to the router {self.url} broke: {first!r}") from group

    # -- the tools ------------------------------------------------------------------------

    async def navigate(self, url: str, *, timeout: float | None = None) -> NavigateResult:
        return await self._typed(NavigateResult, "browser_navigate", {"url": _checks.page_url(url)}, timeout)

    async def snapshot(self, *, timeout: float | None = None) -> Snapshot:
        return await self._typed(Snapshot, "browser_snapshot", {}, timeout)

    async def click(self, element: str, target: str, *, timeout: float | None = None) -> PageResult:
        """Clicks ``target`` (a ref from `Snapshot.ref`); ``element`` describes it in words."""
        arguments = {"element": element, "target": _checks.non_empty(target, what="click target")}
        return await self._typed(PageResult, "browser_click", arguments, timeout)

    async def fill_form(
        self, fields: Iterable[FormField | Mapping[str, Any]], *, timeout: float | None = None
    ) -> PageResult:
        """Fills several fields at once: each has ``name``, ``target``, ``type`` (textbox, checkbox,
        radio, combobox, slider) and ``value`` (a bool for a checkbox)."""
        return await self._typed(PageResult, "browser_fill_form", {"fields": _checks.form_fields(fields)}, timeout)

    async def screenshot(self, *, full_page: bool = False, timeout: float | None = None) -> Screenshot:
        arguments: dict[str, Any] = {"scale": "css", "type": "png"}
        if full_page:
            arguments["fullPage"] = True
        return await self._typed(Screenshot, "browser_take_screenshot", arguments, timeout)

    async def evaluate(self, script: str, *, timeout: float | None = None) -> EvaluateResult:
        """Runs ``script``, a JavaScript function (``() => document.title``), in the page."""
        arguments = {"function": _checks.non_empty(script, what="evaluate script")}
        return await self._typed(EvaluateResult, "browser_evaluate", arguments, timeout)

    async def console(self, level: str = "info", *, timeout: float | None = None) -> ConsoleMessages:
        """Console messages at ``level`` or more severe, since the last navigation."""
        arguments = {"level": _checks.console_level(level)}
        return await self._typed(ConsoleMessages, "browser_console_messages", arguments, timeout)

    async def content(
        self,
        ref_id: str,
        *,
        search_for: str | None = None,
        since_ref: str | None = None,
        reset_cursor: bool = False,
        timeout: float | None = None,
    ) -> Content:
        """The page snapshot the router recorded for an earlier call (its ``ref_id``); a second read
        of the same call gives only what changed (see the router's get_content tool)."""
        ref_id = _checks.non_empty(ref_id, what="ref_id")
        arguments: dict[str, Any] = {"ref_id": ref_id}
        if search_for:
            arguments["search_for"] = search_for
        if since_ref is not None:
            arguments["since_ref"] = _checks.non_empty(since_ref, what="since_ref")
        if reset_cursor:
            arguments["reset_cursor"] = True
        result = await self.call(GET_CONTENT, arguments, timeout=timeout)
        return Content.from_result(GET_CONTENT, result, source_ref=ref_id)

    async def tabs(self, *, timeout: float | None = None) -> Tabs:
        return await self._typed(Tabs, "browser_tabs", {"action": "list"}, timeout)

    # -- any tool -------------------------------------------------------------------------

    async def call(
        self, tool: str, arguments: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Any tool by name; the tools/call result as JSON. ToolFailed when it answers isError."""
        tool = _checks.non_empty(tool, what="tool name")
        limit = self.timeout if timeout is None else _checks.timeout(timeout)
        connection = self._open_connection()
        try:
            result = await connection.call(tool, dict(arguments or {}), timeout=limit)
        except SessionExpired:
            if not self.reinitialize_on_expiry:
                raise
            connection = await self._reopen(connection)
            result = await connection.call(tool, dict(arguments or {}), timeout=limit)
        if result.get("isError"):
            answer = ToolResult.from_result(tool, result)
            reason = answer.sections.get("Error", answer.text).strip() or "no text"
            raise ToolFailed(f"{tool} failed: {reason}", tool=tool, text=answer.text, ref_id=answer.ref_id)
        return result

    async def _typed(self, model: type[_R], tool: str, arguments: dict[str, Any], timeout: float | None) -> _R:
        return model.from_result(tool, await self.call(tool, arguments, timeout=timeout))

    # -- the connection -------------------------------------------------------------------

    def _open_connection(self) -> Connection:
        if self._connection is None:
            raise RuntimeError("BrowserSession is not open: use it as `async with BrowserSession(...) as b:`")
        return self._connection

    async def _open(self) -> Connection:
        # Imported here: the SDK is slow to import, and models and errors do not need it.
        from router.client._connection import Connection

        assert self._tg is not None
        connection = Connection(
            self.url, headers=self._headers, timeout=self.timeout, end_on_close=self._end_on_exit,
            transport=self._transport,
        )
        await connection.open(self._tg)
        return connection

    async def _reopen(self, expired: Connection) -> Connection:
        """A new session in place of ``expired``, once, however many calls saw the 404."""
        async with self._reopening:
            current = self._open_connection()
            if current is expired:
                await expired.close(end=False)  # the router has ended it already
                self._connection = await self._open()
            return self._open_connection()

    async def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
