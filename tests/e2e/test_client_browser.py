"""The typed client against the real router: @playwright/mcp workers and headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from router.client import BrowserSession, FormField, SessionExpired, ToolFailed
from tests.support import PAGES, RouterThread, auth_headers, serve_pages

FORM_PAGE = """<!doctype html><html><head><title>Form</title></head><body>
<label>Name <input id="name"></label>
<label><input type="checkbox" id="agree"> Agree</label>
</body></html>"""
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serve_pages({**PAGES, "/form": FORM_PAGE}) as base:
        yield base


def end_from_outside(router: RouterThread, session_id: str | None) -> None:
    """As retention or an operator would: the router ends the session, the client is not told."""
    assert session_id is not None
    answer = httpx.delete(router.url, headers={**auth_headers(router.token), "mcp-session-id": session_id})
    assert answer.status_code == 200


async def test_a_conversation_through_the_typed_client(pw_router: RouterThread, site: str) -> None:
    async with BrowserSession(pw_router.url, token=pw_router.token) as browser:
        page = await browser.navigate(f"{site}/")
        assert (page.url, page.title) == (f"{site}/", "Home")
        assert page.ref_id

        snap = await browser.snapshot()
        assert "Router test page" in snap.snapshot and snap.title == "Home"
        clicked = await browser.click("Click me button", snap.ref("Click me"))
        assert clicked.console_errors == 1 and clicked.url == f"{site}/"
        assert "Clicked" in (await browser.snapshot()).snapshot

        console = await browser.console("error")
        assert [(e.level, e.message, e.url) for e in console.entries] == [("error", "clicked-error", f"{site}/")]
        assert (await browser.evaluate("() => ({title: document.title, n: 1 + 1})")).value == {"title": "Home", "n": 2}
        shot = await browser.screenshot()
        assert shot.mime_type == "image/png" and shot.data.startswith(PNG_MAGIC)

        await browser.navigate(f"{site}/form")
        form = await browser.snapshot()
        await browser.fill_form([
            FormField(name="Name", type="textbox", target=form.ref('textbox "Name"'), value="Ada"),
            {"name": "Agree", "type": "checkbox", "target": form.ref("Agree"), "value": True},
        ])
        filled = await browser.evaluate("() => [document.getElementById('name').value, agree.checked]")
        assert filled.value == ["Ada", True]

        tabs = await browser.tabs()
        assert [(t.index, t.url, t.title, t.current) for t in tabs.tabs] == [(0, f"{site}/form", "Form", True)]

        assert form.ref_id is not None
        recorded = await browser.content(form.ref_id, search_for="Agree")
        assert 'checkbox "Agree"' in recorded.text and "Name" not in recorded.text
        assert recorded.source_ref == form.ref_id

        with pytest.raises(ToolFailed, match="not found"):
            await browser.click("a button that is not there", "e999")
        session_id = browser.session_id
    assert session_id and pw_router.manager.sessions.get(session_id) is None  # ended by DELETE on exit


async def test_an_ended_session_is_session_expired(pw_router: RouterThread, site: str) -> None:
    async with BrowserSession(pw_router.url, token=pw_router.token, end_on_exit=False) as browser:
        end_from_outside(pw_router, browser.session_id)
        with pytest.raises(SessionExpired) as caught:
            await browser.navigate(f"{site}/second")
    assert caught.value.session_id is not None


async def test_an_ended_session_is_reinitialized_when_asked(pw_router: RouterThread, site: str) -> None:
    async with BrowserSession(pw_router.url, token=pw_router.token, reinitialize_on_expiry=True) as browser:
        first = browser.session_id
        end_from_outside(pw_router, first)
        page = await browser.navigate(f"{site}/second")
        assert page.title == "Second"
        assert browser.session_id not in (None, first)
        assert pw_router.manager.sessions.get(browser.session_id) is not None
