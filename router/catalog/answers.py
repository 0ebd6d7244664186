"""The router's answers to ``resources/*`` and ``prompts/*``, the capabilities it adds to the
worker's ``initialize`` answer, and the notices a tool answer gives rise to.

Playwright's worker declares only ``tools``; the router serves these itself, from the record, so
none of them ever starts a worker (a dormant session reads its resources without one).
Notifications go into the session's outbox (router/sessions/outbox.py), which its GET stream
drains: ``notifications/resources/updated`` for a subscribed page or session resource after a
call that showed a page (a navigation, a click), and ``notifications/resources/list_changed`` when
a tab, a screenshot, a console or a network log appears.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from router.catalog.paging import CatalogError, invalid_params, page
from router.catalog.prompts import PromptLibrary
from router.catalog.resources import ResourceCatalog, uri
from router.catalog.session_view import CONSOLE_TOOL, NETWORK_TOOL, SCREENSHOT_TOOL

if TYPE_CHECKING:
    from router.protocol.messages import ClientMessage
    from router.record.snapshots import Extracted
    from router.sessions.table import Session

CAPABILITIES: Final = {"resources": {"subscribe": True, "listChanged": True}, "prompts": {"listChanged": False}}
LISTED_BY_TOOL: Final = frozenset({SCREENSHOT_TOOL, CONSOLE_TOOL, NETWORK_TOOL})
UPDATED: Final = "notifications/resources/updated"
LIST_CHANGED: Final = "notifications/resources/list_changed"


class Catalog:
    def __init__(self, resources: ResourceCatalog, prompts: PromptLibrary) -> None:
        self.resources = resources
        self.prompts = prompts
        self._handlers: dict[str, Callable[[Session, Mapping[str, Any]], Awaitable[dict[str, Any]]]] = {
            "resources/list": self._list,
            "resources/templates/list": self._templates,
            "resources/read": self._read,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "prompts/list": self._prompts,
            "prompts/get": self._prompt,
        }

    def handles(self, method: str | None) -> bool:
        return method in self._handlers

    @staticmethod
    def with_capabilities(result: Any) -> Any:
        """The ``initialize`` result declaring what the router serves beside the worker's tools."""
        if isinstance(result, dict):
            capabilities = result.get("capabilities")
            result["capabilities"] = {**(capabilities if isinstance(capabilities, dict) else {}), **CAPABILITIES}
        return result

    @staticmethod
    def recordable(response: dict[str, Any]) -> dict[str, Any]:
        """An answer as the record keeps it: an image read by its size only, not a copy each time."""
        result = response.get("result")
        contents = result.get("contents") if isinstance(result, dict) else None
        if not isinstance(result, dict) or not isinstance(contents, list):
            return response
        kept = [
            {k: v for k, v in c.items() if k != "blob"} | {"blob_chars": len(str(c["blob"]))}
            if isinstance(c, dict) and "blob" in c else c
            for c in contents
        ]
        return {**response, "result": {**result, "contents": kept}}

    async def answer(self, session: Session, message: ClientMessage) -> dict[str, Any]:
        """The result for one of ``handles``' methods; CatalogError for a JSON-RPC error."""
        handler = self._handlers[message.method or ""]
        return await handler(session, message.params)

    def after_tool_answer(self, session: Session, tool: str | None, facts: Extracted) -> None:
        """Queues what the client should hear after this tool answer (``facts``: its summary)."""
        outbox = session.outbox
        if facts.page_url is not None:
            for address in sorted(outbox.subscribed):
                if address == uri("session", session.id) or address.startswith(uri("page", session.id) + "/"):
                    outbox.notify(UPDATED, {"uri": address})
        if tool == NETWORK_TOOL:
            for address in sorted(outbox.subscribed):
                if address.startswith(uri("network-log", session.id) + "/"):
                    outbox.notify(UPDATED, {"uri": address})
        listed = facts.sections.get("Open tabs")
        tabs = sum(line.startswith("- ") for line in listed.split("\n")) if listed is not None else None
        if tabs is None and facts.page_url is not None:
            tabs = 1
        tabs_changed = tabs is not None and tabs != outbox.listed_tabs
        if tabs is not None:
            outbox.listed_tabs = tabs
        if tabs_changed or facts.has_image or (tool in LISTED_BY_TOOL and not facts.is_error):
            outbox.notify(LIST_CHANGED)

    # -- the methods -----------------------------------------------------------------------------

    async def _list(self, session: Session, params: Mapping[str, Any]) -> dict[str, Any]:
        items, following = page(await self.resources.list(session), params.get("cursor"))
        return _paged("resources", items, following)

    async def _templates(self, session: Session, params: Mapping[str, Any]) -> dict[str, Any]:
        items, following = page(self.resources.templates(), params.get("cursor"))
        return _paged("resourceTemplates", items, following)

    async def _read(self, session: Session, params: Mapping[str, Any]) -> dict[str, Any]:
        return await self.resources.read(session, _uri(params))

    async def _subscribe(self, session: Session, params: Mapping[str, Any]) -> dict[str, Any]:
        address = _uri(params)
        self.resources.owned(session, address)  # another session's or a malformed URI: -32002
        if not session.outbox.subscribe(address):
            raise invalid_params("Invalid params: too many subscriptions in this session")
        return {}

    async def _unsubscribe(self, session: Session, params: Mapping[str, Any]) -> dict[str, Any]:
        session.outbox.subscribed.discard(_uri(params))
        return {}

    async def _prompts(self, session: Session, params: Mapping[str, Any]) -> dict[str, Any]:
        items, following = page([p.listed() for p in self.prompts.prompts()], params.get("cursor"))
        return _paged("prompts", items, following)

    async def _prompt(self, session: Session, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.prompts.get(params.get("name"), params.get("arguments"))


def _uri(params: Mapping[str, Any]) -> str:
    address = params.get("uri")
    if not isinstance(address, str) or not address:
        raise invalid_params("Invalid params: uri must be a string")
    return address


def _paged(key: str, items: list[dict[str, Any]], following: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {key: items}
    if following is not None:
        result["nextCursor"] = following
    return result


__all__ = ["CAPABILITIES", "Catalog", "CatalogError"]
