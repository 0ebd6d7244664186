"""localStorage put back through the resumed tab itself, before its page loads.

``browser_set_storage_state`` restores an origin's localStorage by opening a page of its own,
loading the origin there (a renderer started for it) and closing it again: on a warm worker ~70 ms
and ~0.1 CPU-s per origin, all before the current page may load. Here the items go in through a
document of the origin loaded in the first tab: a route answers a path of ours with a script that
sets them, the tab loads it, the route goes. The current page then loads in the same renderer,
and its own scripts see the items on its first load. That document is one more the tab loaded, so
the refs of the current page move on by one prefix (restore.py reloads the page to reproduce
them): it replaces a reload, and only as many origins go this way as reloads are due.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import anyio

from router.sessions.control import ControlError, ControlSession

log = logging.getLogger("mcp_router.continuity")

# No page of the origin is asked for: the route answers this path, and is gone before the page loads.
RESTORE_PATH: Final = "/__mcp_router_storage_restore__"
# The script's last act: the navigation's answer shows it ran (a service worker of the origin, say,
# could have answered in the route's place).
RESTORED_TITLE: Final = "mcp-router storage restored"
# The route takes a glob: an origin holding one of these (an IPv6 host's brackets) goes the slow way.
GLOB_CHARS: Final = frozenset("*?{}[]\\,")
WEB_SCHEMES: Final = frozenset({"http", "https"})
UNROUTE_TIMEOUT: Final = 5.0


@dataclass(frozen=True)
class InTabResult:
    restored: int  # origins whose items are in, from the first
    documents: int  # documents the tab loaded (one may have been another's than ours)


@dataclass(frozen=True)
class OriginSplit:
    in_tab: list[Mapping[str, Any]]  # restored through the first tab, in this order
    elsewhere: list[Any]  # left to browser_set_storage_state


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _routable(entry: object) -> bool:
    if not isinstance(entry, Mapping) or set(entry) != {"origin", "localStorage"}:
        return False  # anything beside localStorage (IndexedDB) is Playwright's to restore
    origin, items = entry["origin"], entry["localStorage"]
    if not isinstance(origin, str) or not isinstance(items, list) or GLOB_CHARS & set(origin):
        return False
    parts = urlsplit(origin)
    if parts.scheme not in WEB_SCHEMES or not parts.netloc or _origin(origin) != origin:
        return False
    return all(isinstance(i, Mapping) and {type(i.get("name")), type(i.get("value"))} == {str} for i in items)


def is_restore_document(url: str) -> bool:
    """A tab left on our restore document (a restore cut short): not a page to save or reopen."""
    return urlsplit(url).path == RESTORE_PATH


def split_origins(origins: Sequence[Any], current: str | None, budget: int) -> OriginSplit:
    """Up to ``budget`` origins for the first tab, the current page's first (its storage must be
    there when it loads; the others' only eventually, but the tab is the cheap way for them too)."""
    if budget <= 0:
        return OriginSplit([], list(origins))
    page_origin = None if current is None else _origin(current)
    candidates = sorted(
        (o for o in origins if _routable(o)), key=lambda o: o["origin"] != page_origin
    )  # stable: the current page's origin first, the rest in saved order
    in_tab = candidates[:budget]
    return OriginSplit(in_tab, [o for o in origins if not any(o is t for t in in_tab)])


def sets_anything(storage: Mapping[str, Any], elsewhere: Sequence[Any]) -> bool:
    """Whether ``browser_set_storage_state`` with ``storage``'s cookies and the ``elsewhere``
    origins would put anything into a new worker's empty browser. Nothing saved (a session on pages
    that keep no cookies) costs no call: the tool clears the cache and cookies first, ~0.1-0.4 s
    with ten resumes at once, to restore nothing."""
    return bool(elsewhere) or any(value for key, value in storage.items() if key != "origins")


def restore_document(items: Sequence[Mapping[str, str]]) -> str:
    """An HTML body whose script sets the items (``<`` escaped: a value may hold ``</script>``)."""
    pairs = json.dumps([[i["name"], i["value"]] for i in items]).replace("<", "\\u003c")
    title = json.dumps(RESTORED_TITLE)
    script = f"for (const [k, v] of {pairs}) localStorage.setItem(k, v); document.title = {title};"
    return f"<!doctype html><script>{script}</script>"


async def restore_in_tab(control: ControlSession, origins: Sequence[Mapping[str, Any]]) -> InTabResult:
    """Each origin's items set by loading its restore document in the current tab, until one
    fails: that one and the rest are left to the caller."""
    documents = 0
    for restored, entry in enumerate(origins):
        url = entry["origin"] + RESTORE_PATH
        body = restore_document(entry["localStorage"])
        try:
            await control.call("browser_route", {"pattern": url, "body": body, "contentType": "text/html"})
            try:
                answer = await control.call("browser_navigate", {"url": url})
            finally:
                # While a route stands every request of the context passes through the worker:
                # it goes also when the restore's budget ran out during the navigation.
                with anyio.move_on_after(UNROUTE_TIMEOUT, shield=True):
                    await control.call("browser_unroute", {"pattern": url})
        except ControlError as exc:
            log.info("restoring localStorage of %s in the tab failed: %s", entry["origin"], exc)
            return InTabResult(restored, documents)
        documents += 1
        if f"- Page Title: {RESTORED_TITLE}" not in answer:
            log.info("restoring localStorage of %s in the tab: another document answered", entry["origin"])
            return InTabResult(restored, documents)
    return InTabResult(len(origins), documents)
