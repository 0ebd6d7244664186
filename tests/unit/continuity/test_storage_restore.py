"""Which origins' localStorage goes back through the resumed tab, and the document that carries it
(the real browser's side: test_resume.py, the current page seeing its storage on its first load)."""

from __future__ import annotations

import json
import re
from typing import Any, cast

import anyio
import anyio.lowlevel

from router.sessions.control import ControlSession
from router.sessions.storage_restore import restore_document, restore_in_tab, split_origins

CUT_AFTER = 0.3  # seconds: a restore stuck in its navigation is cut short after this here


def origin(name: str, **extra: Any) -> dict[str, Any]:
    return {"origin": name, "localStorage": [{"name": "k", "value": name}], **extra}


A, B, C = origin("https://a.test"), origin("http://b.test:8080"), origin("https://c.test")


def test_the_current_pages_origin_goes_first_and_no_more_than_the_budget() -> None:
    split = split_origins([A, B, C], "http://b.test:8080/inbox?x=1", budget=2)
    assert split.in_tab == [B, A]
    assert split.elsewhere == [C]


def test_no_budget_leaves_everything_to_playwright() -> None:
    split = split_origins([A, B], "https://a.test/", budget=0)
    assert (split.in_tab, split.elsewhere) == ([], [A, B])


def test_what_a_route_cannot_carry_is_left_to_playwright() -> None:
    ipv6 = origin("http://[::1]:8000")  # brackets are a glob's character class
    indexed = origin("https://d.test", indexedDB=[])
    odd = [ipv6, indexed, origin("file://"), origin("https://e.test/path"), {"origin": "https://f.test"}, "junk"]
    split = split_origins([*odd, A], "http://[::1]:8000/", budget=8)
    assert split.in_tab == [A]
    assert split.elsewhere == odd


def test_the_document_sets_every_item_and_a_value_cannot_close_its_script() -> None:
    items = [{"name": "k", "value": "</script><script>alert(1)</script>"}, {"name": "é\u2028", "value": "2"}]
    body = restore_document(items)
    assert body.count("</script>") == 1 and body.endswith("</script>")
    pairs = re.search(r"of (\[.*\])\) ", body)
    assert pairs is not None
    assert json.loads(pairs.group(1)) == [["k", items[0]["value"]], ["é\u2028", "2"]]


class StuckNavigation:
    """A worker whose navigation never ends (a page that never loads); other calls answer."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        await anyio.lowlevel.checkpoint()  # as a request to the worker: a call a cancellation stops
        self.calls.append(name)
        if name == "browser_navigate":
            await anyio.sleep_forever()
        return ""


async def test_the_route_goes_even_when_the_restore_is_cut_short_in_its_navigation() -> None:
    """While a route stands, every request of the browser passes through the worker: a restore
    given up during the navigation (its budget) still takes the route away."""
    control = StuckNavigation()
    with anyio.move_on_after(CUT_AFTER):
        await restore_in_tab(cast(ControlSession, control), [A])
    assert control.calls == ["browser_route", "browser_navigate", "browser_unroute"]
