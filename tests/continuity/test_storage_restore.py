"""Which origins' localStorage goes back through the resumed tab, and the document that carries it
(the real browser's side: test_resume.py, the current page seeing its storage on its first load)."""

from __future__ import annotations

import json
import re
from typing import Any

from router.sessions.storage_restore import restore_document, split_origins


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
