"""The dashboard in a real headless Chromium (Playwright for Python driving the system browser)
against a router with a live @playwright/mcp session: the session appears, its timeline opens,
a snapshot is read and searched, console and screenshot show, and ending it ends its worker.
The browser signs in first: the token in the login link's fragment becomes an HttpOnly cookie."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright

from router.cli.tables import format_reserve
from router.types import H_CONVERSATION
from tests.integration.router.test_warm_pool import router_loop_call
from tests.support import RawClient, RouterThread, find_ref, playwright_router, router_settings, wait_for
from tests.support.client import initialize_body
from workers.orphans import processes_for


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Browser]:
    # The system Chromium, never a downloaded one; --no-sandbox because tests may run as root.
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, errors  # no script errors, no CSP violations


def sign_in(page: Page, router: RouterThread) -> None:
    page.goto(f"http://127.0.0.1:{router.port}/ui/login#token={router.token}")
    expect(page).to_have_url(f"http://127.0.0.1:{router.port}/ui/")
    expect(page.locator("#status")).to_contain_text("live")


def test_signing_in_with_the_link_or_the_form(pw_router: RouterThread, browser: Browser) -> None:
    base = f"http://127.0.0.1:{pw_router.port}"
    # Its own page: the wrong token's 401 is a console error here, which the `page` fixture forbids.
    page = browser.new_context().new_page()
    page.goto(f"{base}/ui/")  # no cookie yet: the login form
    expect(page).to_have_url(f"{base}/ui/login")
    page.locator("#token").fill("not-the-token")
    with page.expect_response(f"{base}/ui/login") as answer:
        page.locator("button[type=submit]").click()
    assert answer.value.status == 401
    expect(page.locator("#login-result")).to_have_text("wrong token")
    page.locator("#token").fill(pw_router.token)
    page.locator("button[type=submit]").click()
    expect(page).to_have_url(f"{base}/ui/")
    expect(page.locator("#status")).to_contain_text("live")
    cookies = page.context.cookies()
    assert [(c["httpOnly"], c["sameSite"]) for c in cookies] == [(True, "Strict")]
    assert pw_router.token not in cookies[0]["value"]  # a derived value, good for /ui and /api only

    # The link: the fragment signs in and is gone from the address bar.
    page.context.clear_cookies()
    page.goto(f"{base}/ui/login#token={pw_router.token}")
    expect(page).to_have_url(f"{base}/ui/")
    assert pw_router.token not in page.url
    page.context.close()


def test_dashboard_follows_a_live_session_and_ends_it(pw_router: RouterThread, pages: str, page: Page) -> None:
    state = Path(pw_router.settings.state_dir)
    sign_in(page, pw_router)

    with RawClient(pw_router.url) as c:
        c.initialize(name="dashboard-client")
        assert c.session_id is not None
        row = page.locator(f'tr[data-session-id="{c.session_id}"]')
        expect(row).to_be_visible()  # appears without a reload
        expect(row).to_contain_text("dashboard-client")
        expect(row).to_contain_text("new")  # answered by the router: no worker until it browses

        c.text("browser_navigate", url=f"{pages}/")
        expect(row).to_contain_text("live")
        snapshot = c.text("browser_snapshot")
        c.text("browser_click", target=find_ref(snapshot, "Click me"), element="Click me button")
        c.text("browser_take_screenshot")
        worker_pid = pw_router.manager.sessions.get(c.session_id).connection.worker.pid
        expect(row).to_contain_text(f"pid {worker_pid}")
        expect(row.locator("td").nth(9)).to_contain_text("MiB")

        row.click()
        expect(page.locator("#session-id")).to_have_text(c.session_id)
        calls = page.locator("#calls tbody tr")
        expect(calls.filter(has_text="browser_take_screenshot")).to_be_visible()
        expect(page.locator('#calls tr[data-tool="browser_navigate"]')).to_contain_text(f"{pages}/")

        # The snapshot, then the client-side filter keeping matching lines only.
        page.locator('#calls tr[data-tool="browser_snapshot"]').click()
        expect(page.locator("#snapshot")).to_contain_text("Router test page")
        expect(page.locator("#snapshot")).to_contain_text("Click me")
        page.locator("#snapshot-search").fill("click me")
        expect(page.locator("#snapshot-count")).to_contain_text("of")
        filtered = page.locator("#snapshot").inner_text().splitlines()
        assert filtered and all("click me" in line.lower() for line in filtered)
        expect(page.locator("#snapshot")).not_to_contain_text("Router test page")

        # The click's console error, coloured by level.
        page.locator('#calls tr[data-tool="browser_click"]').click()
        expect(page.locator("#console li.level-error")).to_contain_text("clicked-error")

        # The screenshot, served by the router and decoded by the browser.
        page.locator('#calls tr[data-tool="browser_take_screenshot"]').click()
        image = page.locator("#images img").first
        expect(image).to_be_visible()
        wait_for(lambda: image.evaluate("img => img.complete && img.naturalWidth > 0"), timeout=10)
        expect(page.locator("#raw")).to_contain_text("Screenshot")

        # End it from the dashboard: confirm() accepted, the worker and its browser go away.
        assert processes_for(state, c.session_id)
        seen: list[str] = []

        def accept(dialog: Dialog) -> None:
            seen.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        page.locator("#end-button").click()
        expect(page.locator("#action-result")).to_have_text("session is now closed")
        assert seen and "End session" in seen[0]
        wait_for(lambda: not processes_for(state, c.session_id), timeout=10)
        assert pw_router.manager.sessions.get(c.session_id) is None
        expect(row.locator(".state")).to_have_text("closed")
        expect(page.locator("#end-button")).to_be_disabled()


def test_the_resume_reserve_is_a_line_of_its_own_not_a_session(state_dir: Path, page: Page) -> None:
    """A session browsed and went to sleep: the reserve's warm worker is told under the table, and
    the table still lists the one session, without a worker. With the stand-in worker."""
    settings = router_settings(state_dir, resume_reserve=1, idle_timeout=600)
    with RouterThread(settings) as router, RawClient(router.url) as c:
        sign_in(page, router)
        reserve = page.locator("#reserve")
        expect(reserve).to_have_text(format_reserve(0, 1))  # the words of `mcp-router sessions`
        c.initialize(name="reserve-client")
        c.text("browser_navigate", url="https://example.test/")
        manager = router.manager
        router_loop_call(router, manager.hibernate(manager.sessions.get(c.session_id)))
        wait_for(manager.pool.ready_ids, timeout=30)
        expect(reserve).to_have_text("resume reserve: 1 warm worker (at most 1, while browsed sessions sleep)")
        rows = page.locator("#sessions tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("hibernated")
        expect(rows.first.locator("td").nth(7)).to_have_text("-")  # no worker: the warm one is no session's
        c.delete()


def test_without_a_reserve_the_dashboard_says_so(pw_router: RouterThread, page: Page) -> None:
    sign_in(page, pw_router)
    expect(page.locator("#reserve")).to_have_text(format_reserve(0, 0))


def test_dismissed_confirm_changes_nothing(pw_router: RouterThread, page: Page) -> None:
    sign_in(page, pw_router)
    with RawClient(pw_router.url) as c:
        c.initialize(name="keep-me")
        assert c.session_id is not None
        page.locator(f'tr[data-session-id="{c.session_id}"]').click()
        expect(page.locator("#session-id")).to_have_text(c.session_id)
        page.once("dialog", lambda d: d.dismiss())
        page.locator("#end-button").click()
        page.wait_for_timeout(300)
        assert pw_router.manager.sessions.get(c.session_id) is not None
        expect(page.locator("#action-result")).to_have_text(re.compile("^$"))
        c.delete()


def test_session_view_shows_why_it_resumed_and_the_kept_files(pw_router: RouterThread, page: Page) -> None:
    state = Path(pw_router.settings.state_dir).resolve()
    now = time.time()
    conn = sqlite3.connect(state / "router.db", timeout=10)
    with conn:
        conn.execute("INSERT INTO sessions (id, created, last_activity, state) VALUES ('dash-resumed', ?, ?, 'reaped')",
                     (now - 60, now))
        conn.execute("""INSERT INTO requests (ref_id, session_id, method, tool, params, ts)
                        VALUES ('dash-ref', 'dash-resumed', 'tools/call', 'browser_pdf_save', '{}', ?)""", (now - 30,))
        conn.execute("""INSERT INTO responses (ref_id, status, result, ts, duration_ms)
                        VALUES ('dash-ref', 'success', '{"content": []}', ?, 1)""", (now - 30,))
        conn.execute("""INSERT INTO call_files (ref_id, name, title, mime, size, ts)
                        VALUES ('dash-ref', 'page.pdf', 'Page as pdf', 'application/pdf', 8, ?)""", (now - 30,))
        conn.execute("""INSERT INTO session_events (session_id, ts, kind, detail)
                        VALUES ('dash-resumed', ?, 'resumed', 'router-restart')""", (now - 10,))
    conn.close()
    (state / "files" / "dash-ref").mkdir(parents=True)
    (state / "files" / "dash-ref" / "page.pdf").write_bytes(b"%PDF kept")

    sign_in(page, pw_router)
    page.locator('tr[data-session-id="dash-resumed"]').click()
    expect(page.locator("#session-meta")).to_contain_text("resumed after a router restart")
    expect(page.locator('#calls tr.event[data-kind="resumed"]')).to_contain_text("resumed after a router restart")
    page.locator('#calls tr[data-tool="browser_pdf_save"]').click()
    link = page.locator("#files li a")
    expect(link).to_have_text("page.pdf")
    assert link.get_attribute("href") == "/api/calls/dash-ref/files/page.pdf"


def centre_pixel(page: Page) -> list[int]:
    """The colour at the middle of the dashboard's page picture (same-origin blob: readable)."""
    return page.locator("#page-image").evaluate(
        """img => { const c = document.createElement('canvas'); c.width = img.naturalWidth;
                    c.height = img.naturalHeight; const g = c.getContext('2d'); g.drawImage(img, 0, 0);
                    return Array.from(g.getImageData(c.width / 2, c.height / 2, 1, 1).data); }"""
    )


def test_the_dashboard_shows_each_browsers_page_and_a_picture_of_it(
    pw_router: RouterThread, pages: str, page: Page
) -> None:
    """Live sessions show their page's title and URL; opening one takes a picture of its page,
    through the router's own session on the worker: the client's calls, tab and record stay as
    they were, and no file is left. A conversation's sessions are listed together."""
    state = Path(pw_router.settings.state_dir)
    sign_in(page, pw_router)
    with RawClient(pw_router.url) as c, RawClient(pw_router.url) as sleeper:
        c.initialize(name="picture-client")
        c.text("browser_navigate", url=f"{pages}/second")
        c.call("browser_tabs", action="new")
        c.text("browser_navigate", url=f"{pages}/red")  # the client's current tab: the second one
        row = page.locator(f'tr[data-session-id="{c.session_id}"]')
        expect(row.locator("td.page")).to_contain_text("All red")
        expect(row.locator("td.page")).to_contain_text(f"{pages}/red")
        calls_before = len(sqlite3.connect(state / "router.db").execute(
            "SELECT ref_id FROM requests WHERE session_id = ?", (c.session_id,)).fetchall())  # fmt: skip
        out = pw_router.manager.sessions.get(c.session_id).connection.worker.output_dir
        files_before = sorted(p.name for p in out.iterdir())

        row.click()
        expect(page.locator("#session-page")).to_have_text(f"Page: All red — {pages}/red")
        expect(page.locator("#page-picture-note")).to_contain_text("taken")
        wait_for(lambda: page.locator("#page-image").evaluate("img => img.complete && img.naturalWidth > 0"),
                 timeout=10)  # fmt: skip
        red, green, blue, _ = centre_pixel(page)
        assert red > 200 and green < 40 and blue < 40, (red, green, blue)  # the client's page, not its first tab

        # Nothing of the client's changed: its current tab, its record; no file kept.
        assert "- Page URL: " + f"{pages}/red" in c.text("browser_snapshot")
        recorded = sqlite3.connect(state / "router.db").execute(
            "SELECT ref_id FROM requests WHERE session_id = ?", (c.session_id,)).fetchall()  # fmt: skip
        assert len(recorded) == calls_before + 1  # the snapshot just made, nothing of the picture's
        # The snapshot's own state save may hold its transient file for a moment: wait it out.
        kept = [n for n in files_before if not n.startswith("page-")]
        wait_for(lambda: sorted(p.name for p in out.iterdir() if not p.name.startswith("page-")) == kept,
                 timeout=10)  # fmt: skip
        assert not any(p.suffix == ".jpeg" for p in out.iterdir())

        # A session with no browser open: no picture, and a note saying why.
        sleeper.initialize(name="no-browser-yet")
        page.locator(f'tr[data-session-id="{sleeper.session_id}"]').click()
        expect(page.locator("#page-picture-note")).to_have_text("no picture: the session has no browser open now")
        expect(page.locator("#page-image")).to_be_hidden()
        c.delete()
        sleeper.delete()


def test_a_conversations_sessions_are_listed_together(pw_router: RouterThread, page: Page) -> None:
    sign_in(page, pw_router)
    clients = [RawClient(pw_router.url) for _ in range(3)]
    ids = []
    try:
        for k, client in enumerate(clients):  # the first and the last name one conversation
            extra = {H_CONVERSATION: "dashboard-conversation-1"} if k != 1 else {}
            response = client.post(initialize_body(name=f"grouped-{k}"), **extra)
            assert response.status_code == 200
            ids.append(response.headers["mcp-session-id"])
        cid = pw_router.manager.sessions.get(ids[0]).conversation
        group = page.locator(f'tr.conversation[data-conversation="{cid}"]')
        expect(group).to_contain_text("2 sessions")

        def order() -> list[str]:
            return page.locator("#sessions tbody tr").evaluate_all(
                "rows => rows.map(r => r.dataset.sessionId || 'conversation:' + r.dataset.conversation)"
            )

        wait_for(lambda: {ids[0], ids[1], ids[2]} <= set(order()), timeout=10)
        listed = order()
        at = listed.index(f"conversation:{cid}")
        assert set(listed[at + 1 : at + 3]) == {ids[0], ids[2]}  # right under its line, together
        assert ids[1] not in listed[at + 1 : at + 3]
    finally:
        for client in clients:
            client.delete()
            client.close()


def test_shared_browsers_show_their_sessions_and_memory_and_a_sessions_picture(
    tmp_path: Path, chromium: str, pages: str, page: Page
) -> None:
    with (
        playwright_router(tmp_path, chromium, idle_timeout=600, sessions_per_browser=3) as router,
        RawClient(router.url) as a, RawClient(router.url) as b,
    ):  # fmt: skip
        for client, path in ((a, "/red"), (b, "/second")):
            client.initialize()
            client.text("browser_navigate", url=f"{pages}{path}")
        hosts = router.manager.hosts
        assert hosts is not None
        (host,) = hosts.all()
        sign_in(page, router)
        row = page.locator(f'tr[data-session-id="{a.session_id}"]')
        expect(row).to_contain_text("host ")
        expect(row).to_contain_text("(host)")
        expect(page.locator("#hosts")).to_contain_text("shared browsers (3 sessions each)")
        expect(page.locator("#hosts")).to_contain_text("2 sessions")
        expect(page.locator("#hosts")).to_contain_text("MiB")
        row.click()
        expect(page.locator("#session-meta")).to_contain_text(f"on shared browser {host.id}")
        wait_for(lambda: page.locator("#page-image").evaluate("img => img.complete && img.naturalWidth > 0"),
                 timeout=10)  # fmt: skip
        red, green, blue, _ = centre_pixel(page)
        assert red > 200 and green < 40 and blue < 40, (red, green, blue)  # a's page, through a's own session
        assert f"- Page URL: {pages}/second" in b.text("browser_snapshot")  # b's page untouched
        a.delete()
        b.delete()
