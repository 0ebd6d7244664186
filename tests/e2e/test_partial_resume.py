"""A resume that brings the browser only partly back, through the real worker, with a client
shaped like Claude Code: the login it did not restore is not lost at the next pause.

Its storage call fails once (a worker may refuse it; here the test makes it), so the resumed
browser has no cookies. The client, told so in its answer, carries on and signs in elsewhere;
the next save lays the browser's cookies over the ones the resume left out, so the resume after
the next pause brings both back. Before, that save wrote what the browser held, and the
session's first login was gone for good after one failed resume.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from router.sessions import restore
from router.sessions.control import ControlError
from router.sessions.resume_notice import NOTICE_PREFIX, PARTIAL_NOTICE_PREFIX
from tests.e2e.cc_steps import CALL_LIMIT, REAP_IDLE, sign_in, wait_worker_gone, worker_of
from tests.e2e.claude_code import ClaudeCodeClient
from tests.support import RouterThread, playwright_router

SET_STORAGE: Final = "_set_storage_state"


@pytest.fixture(scope="module")
def reaping(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("partial-resume")
    with playwright_router(state, chromium, idle_timeout=REAP_IDLE, resume_reserve=1) as router:
        yield router


def saved_cookies(state_dir: Path, session_id: str) -> dict[str, str]:
    state = json.loads((state_dir / "sessions" / session_id / "state.json").read_text())
    return {c["name"]: c["value"] for c in state["storage"]["cookies"]}


def test_a_login_the_resume_left_out_survives_the_next_pause(
    reaping: RouterThread, pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = reaping.settings.state_dir
    real = getattr(restore, SET_STORAGE)
    refusals: list[str] = []

    async def refuse_once(*args: Any, **kwargs: Any) -> None:
        if not refusals:
            refusals.append("refused")
            raise ControlError("browser_set_storage_state refused")
        await real(*args, **kwargs)

    with ClaudeCodeClient(reaping.url) as cc:
        sign_in(cc, pages, "first")  # cookie session=first
        sid = cc.session_id
        wait_worker_gone(reaping, sid, worker_of(reaping, sid))
        assert saved_cookies(state, sid).get("session") == "first"

        monkeypatch.setattr(restore, SET_STORAGE, refuse_once)
        text, _ = cc.call("browser_navigate", url=f"{pages}/set?v=second", timeout=CALL_LIMIT)
        assert refusals and PARTIAL_NOTICE_PREFIX in text, text
        cookies, _ = cc.call("browser_evaluate", function="() => document.cookie", timeout=CALL_LIMIT)
        assert "token=second" in cookies and "session=first" not in cookies, cookies  # only partly back

        wait_worker_gone(reaping, sid, worker_of(reaping, sid))  # the save at the reap
        assert saved_cookies(state, sid) == {"session": "first", "token": "second"}

        text, _ = cc.call("browser_tabs", action="list", timeout=CALL_LIMIT)  # a whole resume this time
        assert NOTICE_PREFIX in text and PARTIAL_NOTICE_PREFIX not in text, text
        session = reaping.manager.sessions.get(sid)
        assert session is not None and session.unrestored is None  # nothing left out any more
        cookies, _ = cc.call("browser_evaluate", function="() => document.cookie", timeout=CALL_LIMIT)
        assert "session=first" in cookies and "token=second" in cookies, cookies
        assert cc.status()["deletes"] == 0
