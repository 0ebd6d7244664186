"""Resources and prompts the router serves itself (router/catalog/): through the Python SDK
against the stand-in worker, and the parts on their own (prompt files, cursors, the notices a tool
answer gives rise to)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError

from router.catalog.answers import LIST_CHANGED, UPDATED, Catalog
from router.catalog.paging import CatalogError, page
from router.catalog.prompts import BUILTIN_DIR, PromptLibrary
from router.catalog.resources import ResourceCatalog, uri
from router.catalog.session_view import Answer, SessionView, tabs_of
from router.protocol.messages import parse
from router.record.snapshots import summarize
from router.sessions.table import Session
from tests.support import RouterThread
from tests.support.sdk import sdk_client, session_named, subscribe

INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002
BUILTIN_PROMPTS = {"web-scraping", "form-filling", "login-flow", "screenshot-comparison", "e2e-user-flow"}


# -- through the SDK, stand-in worker ------------------------------------------------------------


async def test_capabilities_and_prompts_through_the_sdk(fake_router: RouterThread) -> None:
    async with sdk_client(fake_router, "catalog-prompts") as c:
        capabilities = c.server_capabilities
        assert capabilities is not None and capabilities.tools is not None
        assert capabilities.resources is not None and capabilities.resources.subscribe is True
        assert capabilities.resources.list_changed is True and capabilities.prompts is not None
        listed = {p.name: p for p in (await c.list_prompts()).prompts}
        assert set(listed) >= BUILTIN_PROMPTS
        assert {a.name for a in listed["form-filling"].arguments or []} == {"url", "fields"}
        got = await c.get_prompt("web-scraping", {"url": "https://shop.example", "what": "prices"})
        text = "".join(getattr(m.content, "text", "") for m in got.messages)
        assert "https://shop.example" in text and "prices" in text
        assert "browser_navigate" in text and "get_content" in text
        with pytest.raises(MCPError) as missing:
            await c.get_prompt("web-scraping", {"url": "https://shop.example"})
        assert missing.value.error.code == INVALID_PARAMS and "what" in missing.value.error.message
        with pytest.raises(MCPError) as unknown:
            await c.get_prompt("no-such-prompt", {})
        assert unknown.value.error.code == INVALID_PARAMS
        # None of it needed a worker.
        assert session_named(fake_router, "catalog-prompts").connection is None


async def test_own_resources_read_without_a_worker_and_others_refused(fake_router: RouterThread) -> None:
    async with sdk_client(fake_router, "catalog-a") as a, sdk_client(fake_router, "catalog-b") as b:
        await a.list_tools()  # answered from the handshake cache: still no worker
        mine = session_named(fake_router, "catalog-a")
        listed = [r.uri for r in (await a.list_resources()).resources]
        assert str(listed[0]) == uri("session", mine.id)
        templates = {t.uri_template for t in (await a.list_resource_templates()).resource_templates}
        assert "playwright:///page/{session}/{tab}" in templates and len(templates) == 5
        read = await a.read_resource(uri("session", mine.id))
        text = getattr(read.contents[0], "text", "")
        assert '"state": "new"' in text and '"catalog-a"' in text
        assert mine.connection is None and fake_router.manager.supervisor.live_count == 0
        for address in (uri("session", mine.id), uri("page", mine.id, 0)):
            with pytest.raises(MCPError) as refused:
                await b.read_resource(address)
            assert refused.value.error.code == RESOURCE_NOT_FOUND
        with pytest.raises(MCPError) as refused:
            await subscribe(b, uri("page", mine.id, 0))
        assert refused.value.error.code == RESOURCE_NOT_FOUND


# -- the parts -----------------------------------------------------------------------------------


def test_operator_prompts_add_and_replace_and_bad_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(
        'name = "mine"\n[[arguments]]\nname = "x"\nrequired = true\n[[messages]]\nrole = "user"\ntext = "x=${x}"\n'
    )
    (tmp_path / "login.toml").write_text(
        'name = "login-flow"\ndescription = "ours"\n[[messages]]\nrole = "user"\ntext = "our login"\n'
    )
    (tmp_path / "broken.toml").write_text("name = ")
    library = PromptLibrary(tmp_path)
    names = {p.name for p in library.prompts()}
    assert names == BUILTIN_PROMPTS | {"mine"}
    assert library.get("mine", {"x": "1"})["messages"][0]["content"]["text"] == "x=1"
    assert library.get("login-flow", {})["description"] == "ours"
    for arguments in ({}, {"x": 3}, {"x": "1", "y": "2"}, ["x"]):
        with pytest.raises(CatalogError) as bad:
            library.get("mine", arguments)
        assert bad.value.code == INVALID_PARAMS
    assert all(p.endswith(".toml") for p in (f.name for f in BUILTIN_DIR.iterdir()))


def test_cursors_page_through_and_bad_ones_are_refused() -> None:
    items = list(range(120))
    first, cursor = page(items, None)
    second, cursor2 = page(items, cursor)
    third, end = page(items, cursor2)
    assert first + second + third == items and end is None
    for bad in ("nope", "eDox", 5):  # "eDox" is base64 of "x:1"
        with pytest.raises(CatalogError) as refused:
            page(items, bad)
        assert refused.value.code == INVALID_PARAMS


def answer(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


PAGE = "### Page\n- Page URL: http://x/a\n- Page Title: A\n### Snapshot\n```yaml\n- button \"Go\" [ref=e2]\n```"
TWO_TABS = "### Open tabs\n- 0: [A](http://x/a)\n- 1: (current) [B](http://x/b)\n### Page\n- Page URL: http://x/b\n"


def test_tool_answers_queue_updates_for_subscriptions_and_list_changes() -> None:
    catalog = Catalog(ResourceCatalog(records=lambda: None, files_dir=Path), PromptLibrary())
    session = Session(id="s" * 20)
    session.outbox.subscribe(uri("page", session.id, 0))
    session.outbox.subscribe(uri("page", "other" * 4, 0))  # never matches this session's answers
    catalog.after_tool_answer(session, "browser_navigate", summarize(answer(PAGE)))
    assert session.outbox.take() == [
        {"jsonrpc": "2.0", "method": UPDATED, "params": {"uri": uri("page", session.id, 0)}},
        {"jsonrpc": "2.0", "method": LIST_CHANGED},  # the first page: a tab appeared
    ]
    catalog.after_tool_answer(session, "browser_click", summarize(answer(PAGE)))
    assert [m["method"] for m in session.outbox.take()] == [UPDATED]
    catalog.after_tool_answer(session, "browser_tabs", summarize(answer(TWO_TABS)))
    assert [m["method"] for m in session.outbox.take()] == [UPDATED, LIST_CHANGED]
    screenshot = {"content": [{"type": "text", "text": "### Result\nTook it"}, {"type": "image", "data": ""}]}
    catalog.after_tool_answer(session, "browser_take_screenshot", summarize(screenshot))
    assert [m["method"] for m in session.outbox.take()] == [LIST_CHANGED]


async def test_outbox_bounds_and_deduplicates() -> None:
    session = Session(id="t" * 20)
    for n in range(100):
        session.outbox.notify(UPDATED, {"uri": f"u{n}"})
    session.outbox.notify(UPDATED, {"uri": "u99"})
    taken = session.outbox.take()
    assert len(taken) == 64 and taken[-1]["params"] == {"uri": "u99"}
    written: list[dict[str, Any]] = []
    arrived = anyio.Event()

    async def write(message: dict[str, Any]) -> None:
        written.append(message)
        arrived.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(session.outbox.drain, write)
        session.outbox.notify(LIST_CHANGED)
        with anyio.fail_after(5):
            await arrived.wait()
        tg.cancel_scope.cancel()
    assert written == [{"jsonrpc": "2.0", "method": LIST_CHANGED}]


def test_session_view_reads_tabs_and_network_logs() -> None:
    view = SessionView("s" * 20)
    network = "### Result\n[GET] http://x/b => [200] OK\n"
    for ref, tool, text in (("r3", "browser_network_requests", network), ("r2", "browser_tabs", TWO_TABS),
                            ("r1", "browser_navigate", PAGE)):
        facts = summarize(answer(text))
        view.answers.append(Answer(ref, tool, 0.0, facts.page_snapshot, facts, tabs_of(facts)))
    assert [(t.index, t.url, t.current) for t in view.tabs()] == [(0, "http://x/a", False), (1, "http://x/b", True)]
    assert list(view.network_logs()) == [1]
    snapshot = view.snapshot(view.tabs()[0])
    assert snapshot is not None and snapshot.ref_id == "r1"


async def test_malformed_or_foreign_uris_are_not_found_and_a_missing_uri_is_invalid() -> None:
    catalog = Catalog(ResourceCatalog(records=lambda: None, files_dir=Path), PromptLibrary())
    session = Session(id="s" * 20)
    for address in (
        f"playwright:///session/{session.id}/0", f"playwright:///page/{session.id}", f"playwright:///bogus/{session.id}/1",
        f"playwright:///page/{session.id}/x", f"http://host/session/{session.id}", f"playwright:///page/{'o' * 20}/0",
        f"playwright:///console/{session.id}/../../etc",
    ):
        with pytest.raises(CatalogError) as refused:
            await catalog.answer(session, parse(json.dumps(read_request(address)).encode()))
        assert refused.value.code == RESOURCE_NOT_FOUND, address
    with pytest.raises(CatalogError) as invalid:
        await catalog.answer(session, parse(json.dumps(read_request(None)).encode()))
    assert invalid.value.code == INVALID_PARAMS


def read_request(address: str | None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": address}}
