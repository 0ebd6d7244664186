"""The steps of a conversation the way Claude Code lives it (tests/e2e/claude_code.py is the
client) and what the tests check after them: sign in, pause until the worker is gone, carry on
with the old ref. Shared by tests/e2e/test_claude_code*.py and test_partial_resume.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx

from router.operator.api import ACTION_HEADER
from tests.e2e.claude_code import ClaudeCodeClient
from tests.support import (
    RouterThread,
    auth_headers,
    wait_for,
)
from tests.support.saved import SAVE_WAIT
from workers.orphans import processes_for

# The target for the first call after any change of worker is 5 s; scripts/bench measures
# that. Here the bound only tells a resume from a stall (Claude Code saw 66 s): on a loaded 2-core
# CI machine a healthy resume took 5.6-6.5 s, so a tight bound made the suite flaky, not stricter.
ANSWER_WITHIN: Final = 20.0
CALL_LIMIT: Final = 30.0  # past this the call is failed outright (above ANSWER_WITHIN, below the stall)
PINGS_WITHIN: Final = 15.0  # the worker pings every 3 s once its GET stream is open; slack for load
WORKER_GONE: Final = 20.0
# Seconds: the reaping router's idle timeout. Past the worker's 3-s ping period: a resumed worker's
# next ping may come up to 3 s after the client's last call, and at 2 s the session was at times
# reaped again before it (as scripts/bench found for its own reaping router).
REAP_IDLE: Final = 4.0
RESERVE_READY: Final = 40.0  # a reserve worker spawned and its browser launched, on a loaded machine
REF_RE: Final = re.compile(r"\[ref=([a-z0-9]+)\]")


@dataclass(frozen=True)
class Before:
    """What the model holds before the pause, and the client's counters then."""

    tag: str
    ref: str
    url: str
    session_id: str
    pings: int
    roots: int


def find_ref(snapshot: str, label: str) -> str:
    for line in snapshot.splitlines():
        if label in line:
            match = REF_RE.search(line)
            if match:
                return match.group(1)
    raise AssertionError(f"no ref for {label!r} in:\n{snapshot}")


def sign_in(cc: ClaudeCodeClient, pages: str, tag: str) -> Before:
    """One navigation to the app (which sets a session cookie), a snapshot for the button's ref,
    and the worker's first roots/list answered through the client's stream."""
    text, _ = cc.call("browser_navigate", url=f"{pages}/app?login={tag}")
    assert f"- Page URL: {pages}/app" in text, text
    snapshot, _ = cc.call("browser_snapshot")
    ref = find_ref(snapshot, 'button "Continue"')
    status = cc.wait_status(
        lambda s: s["roots_list_answered"] >= 1,
        timeout=PINGS_WITHIN,
        what="the worker's roots/list (asked at the first tool call) answered before the pause",
    )
    return Before(tag, ref, f"{pages}/app", cc.session_id, status["pings_answered"], status["roots_list_answered"])


def carries_on(cc: ClaudeCodeClient, before: Before, router: RouterThread | None = None) -> None:
    """The first call after the change: the old ref clicks within ANSWER_WITHIN seconds, on the
    same page with the same session cookie, and the new worker's roots/list and pings cross.
    A warm worker's session may have had the client's roots from the router already (``router``
    tells): that worker does not ask."""
    answer = cc.call_raw("browser_click", {"target": before.ref, "element": "Continue button"}, timeout=CALL_LIMIT)
    text, seconds = str(answer["text"]), float(answer["seconds"])
    assert not answer["is_error"] and "### Error" not in text, f"the click on {before.ref} failed: {text}"
    assert seconds <= ANSWER_WITHIN, f"the first call after the pause took {seconds:.1f}s"
    assert f"- Page URL: {before.url}" in text, text
    after_call = cc.status()
    snapshot, _ = cc.call("browser_snapshot", timeout=CALL_LIMIT)
    assert f"continued with session={before.tag}" in snapshot, f"the click did not reach the page:\n{snapshot}"
    cookies, _ = cc.call("browser_evaluate", timeout=CALL_LIMIT, function="() => document.cookie")
    assert f"session={before.tag}" in cookies, cookies
    cc.wait_status(
        lambda s: s["roots_list_answered"] > before.roots or worker_has_roots(router, before.session_id),
        timeout=PINGS_WITHIN,
        what="the new worker's roots/list answered through the client's stream",
    )
    cc.wait_status(
        lambda s: s["pings_answered"] > after_call["pings_answered"],
        timeout=PINGS_WITHIN,
        what=f"pings from the new worker within {PINGS_WITHIN:.0f} s of the resume",
    )
    final = cc.status()
    assert final["session_id"] == before.session_id
    assert final["deletes"] == 0


def worker_has_roots(router: RouterThread | None, session_id: str) -> bool:
    """The session's worker took the client's roots from the router (router/sessions/roots.py)."""
    session = router.manager.sessions.get(session_id) if router is not None else None
    return session is not None and session.worker_has_roots


def worker_pid(base: str, session_id: str) -> int | None:
    """The session's worker as the operator API shows it (None: it has none now)."""
    response = httpx.get(f"{base}/api/sessions/{session_id}", headers=auth_headers(), timeout=10, trust_env=False)
    assert response.status_code == 200, response.text
    pid = response.json()["session"]["worker_pid"]
    assert pid is None or isinstance(pid, int), response.text
    return pid


def saved(state_dir: Path, session_id: str, needle: str) -> bool:
    """The session's saved browser state holds ``needle``: what survives a kill."""
    try:
        return needle in (state_dir / "sessions" / session_id / "state.json").read_text()
    except OSError:
        return False


def worker_of(router: RouterThread, session_id: str) -> str:
    """The id the session's worker runs under: its own, or that of the warm worker it took."""
    session = router.manager.sessions.get(session_id)
    assert session is not None and session.connection is not None, "the session has no worker"
    return session.connection.worker.session_id


def wait_worker_gone(router: RouterThread, session_id: str, worker: str) -> None:
    """The pause: until the session is dormant and no process of its worker is left."""
    session = router.manager.sessions.get(session_id)
    assert session is not None
    state = router.settings.state_dir
    wait_for(lambda: session.connection is None and not processes_for(state, worker), timeout=WORKER_GONE)


def pause_all(router: RouterThread, clients: tuple[ClaudeCodeClient, ...], pages: str, tag: str) -> list[Before]:
    """Each conversation signed in (``sign_in``, tagged ``<tag><k>``), then the pause of them
    all: until each is dormant and its worker gone. Each worker is read right after its own
    sign-in: under load the first conversation may be reaped while the next one signs in."""
    befores, workers = [], []
    for k, cc in enumerate(clients):
        befores.append(sign_in(cc, pages, f"{tag}{k}"))
        workers.append(worker_of(router, cc.session_id))
    for cc, worker in zip(clients, workers, strict=True):
        wait_worker_gone(router, cc.session_id, worker)
    return befores


def signed_in_and_saved(cc: ClaudeCodeClient, router: RouterThread, pages: str, tag: str) -> Before:
    """``sign_in``, then until the session's saved state holds its cookie: what survives a kill
    (and nothing of the router's own is pending on the worker any more)."""
    before = sign_in(cc, pages, tag)
    wait_for(lambda: saved(router.settings.state_dir, cc.session_id, tag), timeout=SAVE_WAIT)
    return before


def hibernate(router: RouterThread, session_id: str) -> None:
    """As the dashboard's button does: the session's worker goes, its state saved; until no
    process of it is left."""
    worker = worker_of(router, session_id)
    response = httpx.post(
        f"{base_of(router)}/api/sessions/{session_id}/hibernate",
        headers={ACTION_HEADER: "1", **auth_headers()},
        timeout=30,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    wait_worker_gone(router, session_id, worker)


def base_of(router: RouterThread) -> str:
    return router.url.removesuffix("/mcp")
