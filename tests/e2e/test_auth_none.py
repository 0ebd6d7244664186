"""--auth none through real @playwright/mcp workers: /mcp wants no token, but a page in one
conversation's browser cannot lead the model to another conversation's record. The workers'
browsers are told not to request the router's address, but that block does not apply to
redirects, so the dashboard and /api keep asking for the token."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx

from tests.support import TEST_TOKEN, RawClient, auth_headers, playwright_router
from tests.support.pages import REDIRECT_PATH

SECRET = "VICTIM-SECRET-4242"


def test_a_redirect_does_not_show_the_model_another_conversations_record(
    tmp_path: Path, chromium: str, pages: str
) -> None:
    with (
        playwright_router(tmp_path, chromium, auth="none") as router,
        RawClient(router.url, token=None) as victim,
        RawClient(router.url, token=None) as steered,
    ):
        victim.initialize()
        assert "Home" in victim.text("browser_navigate", url=f"{pages}/?note={SECRET}")
        record = f"http://127.0.0.1:{router.port}/api/sessions/{victim.session_id}"
        # The secret is in the record, for whoever shows the token: the test can fail.
        shown = httpx.get(record, headers=auth_headers(TEST_TOKEN), trust_env=False, timeout=10)
        assert shown.status_code == 200 and SECRET in shown.text

        steered.initialize()
        text = steered.text("browser_navigate", url=f"{pages}{REDIRECT_PATH}?to={quote(record, safe='')}")
        snapshot = steered.text("browser_snapshot")
        assert SECRET not in text and SECRET not in snapshot
        assert "token is required" in text + snapshot  # the router's 401, not a blocked request
        for path in ("/api/sessions", f"/api/sessions/{victim.session_id}"):
            assert httpx.get(f"http://127.0.0.1:{router.port}{path}", trust_env=False).status_code == 401
        victim.delete()
        steered.delete()
