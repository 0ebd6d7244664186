"""What a resume did not bring back, kept until a resume does.

A restore cut short (pages that never load) or failed (a storage call the worker refused) leaves
the browser without part of what the session had saved: its cookies and storage, or some of its
tabs. A save then writes what the browser holds, and the session's logins or tabs would be gone
for good after one pause. So the part left out is kept beside the session for the life of that
worker, and every save lays what the browser holds over it: a cookie or item the browser holds
wins over the kept one of the same name; a kept one the browser lacks stays. The price: a cookie
or item deleted in that worker's life (a logout) comes back from what was kept, which cannot be
told from one that was never restored; losing a login silently is the worse of the two.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from router.sessions.storage_restore import is_restore_document

__all__ = ["BLANK", "Unrestored", "left_out", "merged_storage", "merged_tabs", "not_a_page"]

BLANK: Final = "about:blank"


@dataclass(frozen=True)
class Unrestored:
    storage: Mapping[str, Any] | None  # the saved storage state, when it did not all go in
    tabs: tuple[str, ...]  # the saved tabs, when they were not all opened

    def under(self, storage: Mapping[str, Any], tabs: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
        """What a save writes: the browser's ``storage`` and ``tabs`` laid over what is kept."""
        merged = dict(storage) if self.storage is None else merged_storage(self.storage, storage)
        return merged, merged_tabs(self.tabs, tabs)


def left_out(saved: Mapping[str, Any] | None, *, storage_done: bool, tabs_done: bool) -> Unrestored | None:
    """The part of ``saved`` (a state.json) a restore that got this far did not put back."""
    if saved is None:
        return None
    storage = saved.get("storage")
    kept_storage = storage if isinstance(storage, Mapping) and not storage_done else None
    tabs = saved.get("tabs")
    kept_tabs = () if tabs_done or not isinstance(tabs, list) else tuple(t for t in tabs if isinstance(t, str))
    if kept_storage is None and not kept_tabs:
        return None
    return Unrestored(kept_storage, kept_tabs)


def merged_storage(kept: Mapping[str, Any], current: Mapping[str, Any], now: float | None = None) -> dict[str, Any]:
    """``current`` (Playwright's storage state) laid over ``kept``: cookies by (name, domain,
    path), an origin's localStorage items by name; a kept cookie that has expired is dropped."""
    moment = time.time() if now is None else now
    cookies = _list(current.get("cookies"))
    held = {_cookie_key(c) for c in cookies}
    cookies += [
        c for c in _list(kept.get("cookies")) if _cookie_key(c) not in held and not _expired(c, moment)
    ]  # fmt: skip
    origins = [dict(o) if isinstance(o, Mapping) else o for o in _list(current.get("origins"))]
    by_origin = {o.get("origin"): o for o in origins if isinstance(o, dict)}
    for entry in _list(kept.get("origins")):
        if not isinstance(entry, Mapping):
            continue
        mine = by_origin.get(entry.get("origin"))
        if mine is None:
            mine = by_origin[entry.get("origin")] = dict(entry)
            origins.append(mine)
            continue
        items = _list(mine.get("localStorage"))
        names = {i.get("name") for i in items if isinstance(i, Mapping)}
        items += [i for i in _list(entry.get("localStorage")) if isinstance(i, Mapping) and i.get("name") not in names]
        mine["localStorage"] = items
    return {**kept, **current, "cookies": cookies, "origins": origins}


def merged_tabs(kept: Sequence[str], current: Sequence[str]) -> list[str]:
    """The browser's tabs in their order (the client knows them by index), but for blank ones,
    then each kept one the browser does not have open (as often as it was kept)."""
    if not kept:
        return list(current)
    tabs = [t for t in current if not not_a_page(t)]
    unmatched = list(tabs)
    for tab in kept:
        if tab in unmatched:
            unmatched.remove(tab)
        elif not not_a_page(tab):
            tabs.append(tab)
    return tabs


def not_a_page(url: str) -> bool:
    """A tab with nothing worth reopening: blank, or left on a storage restore's own document."""
    return url == BLANK or is_restore_document(url)


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _cookie_key(cookie: object) -> tuple[Any, ...]:
    if not isinstance(cookie, Mapping):
        return (id(cookie),)
    return (cookie.get("name"), cookie.get("domain"), cookie.get("path"), cookie.get("partitionKey"))


def _expired(cookie: object, now: float) -> bool:
    expires = cookie.get("expires") if isinstance(cookie, Mapping) else None
    return isinstance(expires, int | float) and 0 < expires < now
