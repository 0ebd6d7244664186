"""Claude Code's project (its roots) through a real @playwright/mcp worker, which takes the roots
once per MCP session, at its first call: a file saved by a relative name lands in the project.
After a restart of the router, the first worker gets the project before the client's GET stream
is back (session.json keeps it); after ``notifications/roots/list_changed``, the worker the
session has already works in the new project from its next call on; a change announced with the
stream away leaves a resumed worker in the project the client gave last."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import httpx
import pytest

from router.sessions.roots import ROOTS_CHANGED
from tests.support import (
    RawClient,
    RouterThread,
    auth_headers,
    playwright_router,
    serve_process,
    spare_port,
    text_of,
    wait_for,
)
from tests.support.roots_client import ProjectStream, cc_session
from workers.orphans import processes_for

ANSWERED_WITHIN: Final = 10.0
REAP_IDLE: Final = 2.0
WORKER_GONE: Final = 30.0
# A router of its own that reaps soon, with no worker ready ahead.
REAPING: Final = (
    "--log-level", "warning", "--idle-timeout", str(REAP_IDLE), "--resume-reserve", "0", "--warm-workers", "0",
)


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("roots-lifecycle")
    with playwright_router(state, chromium, idle_timeout=600) as shared:
        yield shared


@contextmanager
def claude_code(url: str, project: Path) -> Iterator[tuple[RawClient, ProjectStream]]:
    """A session in Claude Code's shape: roots declared, its GET stream held and answering
    ``project``, the router's own roots/list answered. Never DELETEd here."""
    with cc_session(url) as client:
        stream = ProjectStream(url, client.session_id or "", project).start()
        wait_for(lambda: stream.counts()[0] >= 1, timeout=ANSWERED_WITHIN)
        yield client, stream


def screenshot_lands_in(client: RawClient, project: Path, name: str) -> None:
    answer = text_of(client.call("browser_take_screenshot", filename=name))
    assert (project / name).is_file(), f"not saved in the client's project {project}:\n{answer}"


def test_changed_roots_reach_the_worker_the_session_has(router: RouterThread, pages: str, tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    with claude_code(router.url, before) as (client, stream):
        assert "- Page Title:" in text_of(client.call("browser_navigate", url=f"{pages}/"))
        screenshot_lands_in(client, before, "first.png")
        asked = stream.counts()[0]
        stream.project = after  # the client's project moved: it says so
        assert client.post({"jsonrpc": "2.0", "method": ROOTS_CHANGED}).status_code == 202
        wait_for(lambda: stream.counts()[0] > asked, timeout=ANSWERED_WITHIN)  # the router asked again
        screenshot_lands_in(client, after, "second.png")
        page = text_of(client.call("browser_snapshot"))
        assert f"- Page URL: {pages}/" in page, f"the page was lost on the way:\n{page}"
        assert client.delete().status_code == 200
        stream.join()


def test_the_first_worker_after_a_restart_gets_the_project_with_the_stream_away(
    state_dir: Path, chromium: str, pages: str, tmp_path: Path
) -> None:
    """Claude Code's conversation: a call, a pause past the idle timeout (the worker reaped), the
    router killed and started again, and the next call before the client's stream is back."""
    project = tmp_path / "project"
    project.mkdir()
    port = spare_port()
    with (
        serve_process(state_dir, *REAPING, port=port, browser=chromium) as server,
        claude_code(server.url, project) as (client, stream),
    ):
        sid = client.session_id or ""
        assert "- Page Title:" in text_of(client.call("browser_navigate", url=f"{pages}/"))
        screenshot_lands_in(client, project, "before.png")
        wait_for(lambda: not processes_for(state_dir, sid), timeout=WORKER_GONE)  # reaped
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=10)
        stream.join()

    with serve_process(state_dir, *REAPING, port=port, browser=chromium) as server, RawClient(server.url) as again:
        again.session_id = sid
        screenshot_lands_in(again, project, "after.png")  # no GET stream: the router answers for it
        assert again.delete().status_code == 200


def test_a_resume_after_a_change_heard_with_the_stream_away_keeps_the_last_project(
    state_dir: Path, chromium: str, pages: str, tmp_path: Path
) -> None:
    """The client says its roots changed while its GET stream is away, and its worker is reaped:
    the resumed worker cannot ask it, and gets the project it gave last (not none, which would
    leave Playwright saving in its own cwd); the stream back, the client is asked again."""
    project = tmp_path / "project"
    project.mkdir()
    with (
        serve_process(state_dir, *REAPING, browser=chromium) as server,
        claude_code(server.url, project) as (client, stream),
    ):
        sid = client.session_id or ""
        assert "- Page Title:" in text_of(client.call("browser_navigate", url=f"{pages}/"))
        screenshot_lands_in(client, project, "before.png")
        # Away: the stream taken over by another GET, which then closes.
        headers = {"accept": "text/event-stream", "mcp-session-id": sid, **auth_headers()}
        with httpx.Client(timeout=10, trust_env=False) as http, http.stream("GET", server.url, headers=headers):
            stream.join()
        assert client.post({"jsonrpc": "2.0", "method": ROOTS_CHANGED}).status_code == 202
        wait_for(lambda: not processes_for(state_dir, sid), timeout=WORKER_GONE)  # reaped

        screenshot_lands_in(client, project, "after.png")  # resumed with the stream away
        back = ProjectStream(server.url, sid, project).start()
        wait_for(lambda: back.counts()[0] >= 1, timeout=ANSWERED_WITHIN)  # asked again
        assert client.delete().status_code == 200
        back.join()


def test_a_stream_taken_over_while_the_worker_starts_its_first_call_loses_nothing(
    router: RouterThread, pages: str, tmp_path: Path
) -> None:
    """Claude Code's GET stream reconnects while its first call runs, once the session has its
    worker (which asks the roots then): the call is answered, the worker works in the project,
    the page stays, and the next take-over changes none of it."""
    project = tmp_path / "project"
    project.mkdir()
    with claude_code(router.url, project) as (client, first):
        sid = client.session_id or ""
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.call, "browser_navigate", url=f"{pages}/")
            wait_for(lambda: router.manager.sessions.get(sid).connection is not None, timeout=WORKER_GONE)
            second = ProjectStream(router.url, sid, project).start()
            assert "- Page Title:" in text_of(pending.result(timeout=WORKER_GONE))
        first.join()  # taken over: the router ended it
        screenshot_lands_in(client, project, "after-take-over.png")
        third = ProjectStream(router.url, sid, project).start()
        second.join()
        page = text_of(client.call("browser_snapshot"))
        assert f"- Page URL: {pages}/" in page, f"the page was lost on the way:\n{page}"
        screenshot_lands_in(client, project, "after-second-take-over.png")
        assert sum(s.counts()[1] for s in (first, second, third)) == 1, "the worker asked its roots once"
        assert client.delete().status_code == 200
        third.join()
