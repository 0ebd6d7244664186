"""What @playwright/mcp 0.0.83 with ``--isolated`` does for many MCP sessions on one worker, tested
straight against the worker (no router): the ground a shared-browser mode stands on. Each session
is its own browser context of the worker's one browser. An upgrade that changes any of this must
fail here first.

Holds: cookies, localStorage, sessionStorage, tabs and console never cross; one session's
``browser_close`` leaves the others alone; a DELETE closes that session's context only, and the
last one the browser; concurrent first calls launch one browser; ``--storage-state`` seeds every
new session alike. Does not hold: output files. Every session writes into the worker's one
``--output-dir``, and any session may load any file there (another's saved storage state with
its cookies, say). Without ``--output-dir``, a session with a root of its own keeps its files
to itself.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.e2e.isolated_worker import BrowserWatch, IsolatedWorker, Session, ToolError
from tests.support import wait_for
from tests.support.procs import dead

CONCURRENT_SESSIONS: Final = 4
# The state of the page's origin, as the page itself sees it.
READ_STATE: Final = (
    "() => JSON.stringify({cookie: document.cookie, local: localStorage.getItem('k'),"
    " session: sessionStorage.getItem('s')})"
)
NO_COOKIES: Final = "No cookies found"
OWN_OUTPUT: Final = ".playwright-mcp"  # a session's output dir under its root, without --output-dir
# Tools a per-session restore can use on an --isolated worker with the router's capabilities.
RESTORE_TOOLS: Final = {
    "browser_run_code_unsafe",  # Playwright code in the worker: page.context().addCookies(...)
    "browser_evaluate",
    "browser_set_storage_state",
    "browser_storage_state",
    "browser_cookie_set",
    "browser_localstorage_set",
    "browser_sessionstorage_set",
    "browser_route",
}


def write_state(session: Session, value: str) -> None:
    """A session cookie, a persistent cookie, localStorage and sessionStorage, all ``value``."""
    session.evaluate(
        f"() => {{ document.cookie = 'token={value}; path=/';"
        f" document.cookie = 'kept={value}; max-age=3600; path=/';"
        f" localStorage.setItem('k', '{value}'); sessionStorage.setItem('s', '{value}'); }}"
    )


def read_state(session: Session) -> dict[str, str | None]:
    state: dict[str, str | None] = json.loads(json.loads(session.evaluate(READ_STATE)))
    return state


def state_of(value: str) -> dict[str, str | None]:
    return {"cookie": f"token={value}; kept={value}", "local": value, "session": value}


CLEAN: Final = {"cookie": "", "local": None, "session": None}


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[IsolatedWorker]:
    """One --isolated worker for the module; each test ends the sessions it opens."""
    with IsolatedWorker(tmp_path_factory.mktemp("isolated"), chromium) as running:
        yield running


def test_storage_never_crosses_and_a_new_session_starts_clean(worker: IsolatedWorker, pages: str) -> None:
    with worker.sessions(2) as (a, b):
        a.tool("browser_navigate", url=f"{pages}/second")
        write_state(a, "AAA")
        b.tool("browser_navigate", url=f"{pages}/second")  # the same origin, the same browser
        assert read_state(b) == CLEAN
        assert b.tool("browser_cookie_list").startswith(f"### Result\n{NO_COOKIES}")
        write_state(b, "BBB")
        assert read_state(a) == state_of("AAA")
        assert read_state(b) == state_of("BBB")
        assert "token=AAA" in a.tool("browser_cookie_list")
        assert "token=AAA" not in b.tool("browser_cookie_list")


def test_tabs_never_cross(worker: IsolatedWorker, pages: str) -> None:
    with worker.sessions(2) as (a, b):
        a.tool("browser_navigate", url=f"{pages}/second")
        a.tool("browser_tabs", action="new", url=f"{pages}/workers")
        b.tool("browser_navigate", url=f"{pages}/")
        listed = b.tool("browser_tabs", action="list")
        assert "- 0: (current) [Home]" in listed
        assert "- 1:" not in listed
        assert "/second" not in listed and "/workers" not in listed
        for action in ("select", "close"):
            with pytest.raises(ToolError, match="Tab 1 not found"):
                b.tool("browser_tabs", action=action, index=1)
        mine = a.tool("browser_tabs", action="list")
        assert "- 0: [Second]" in mine and "- 1: (current) [workers e2e]" in mine


def test_console_messages_never_cross(worker: IsolatedWorker, pages: str) -> None:
    with worker.sessions(2) as (a, b):
        for session, name in ((a, "from-a"), (b, "from-b")):
            session.tool("browser_navigate", url=f"{pages}/second")
            session.evaluate(f"() => {{ console.error('{name}-error'); console.log('{name}-log'); }}")
        seen_a = a.tool("browser_console_messages", level="debug", all=True)
        seen_b = b.tool("browser_console_messages", level="debug", all=True)
        assert "from-a-error" in seen_a and "from-a-log" in seen_a
        assert "from-b-error" in seen_b and "from-b-log" in seen_b
        assert "from-b" not in seen_a
        assert "from-a" not in seen_b


def test_output_files_of_all_sessions_share_one_dir_and_each_loads_the_others(
    worker: IsolatedWorker, pages: str
) -> None:
    """Not isolation: the router must keep sessions from each other's files itself."""
    out = worker.output_dir.resolve()
    with worker.sessions(2) as (a, b):
        a.tool("browser_navigate", url=f"{pages}/app?login=secret-of-a")
        b.tool("browser_navigate", url=f"{pages}/second")
        shots = [Path(_link(s.tool("browser_take_screenshot"), "Screenshot of viewport")) for s in (a, b)]
        assert [shot.parent for shot in shots] == [out, out], shots
        assert all(shot.is_file() for shot in shots)
        saved = Path(_link(a.tool("browser_storage_state"), "Storage state"))
        assert saved.parent == out
        # B restores A's file by its absolute name, and holds A's session cookie.
        b.tool("browser_set_storage_state", filename=str(saved))
        assert "session=secret-of-a" in b.tool("browser_cookie_list")
        # The browser itself may not read files, though.
        with pytest.raises(ToolError, match='Access to "file:" protocol is blocked'):
            b.tool("browser_navigate", url=saved.as_uri())


def test_without_output_dir_each_session_keeps_its_files_under_its_own_root(
    tmp_path: Path, chromium: str, pages: str
) -> None:
    """The way out of the shared output dir: no ``--output-dir``, and a root of its own for each
    session. Its files then go to ``<root>/.playwright-mcp`` and the file tools refuse any path
    outside its root and that dir."""
    roots = [tmp_path / "project-a", tmp_path / "project-b"]
    for root in roots:
        root.mkdir()
    with (
        IsolatedWorker(tmp_path / "w", chromium, output_dir=False) as own,
        own.session(roots[0]) as a,
        own.session(roots[1]) as b,
    ):
        a.tool("browser_navigate", url=f"{pages}/app?login=secret-of-a")
        b.tool("browser_navigate", url=f"{pages}/second")
        saved = Path(_link(a.tool("browser_storage_state"), "Storage state"))
        assert saved.parent == roots[0] / OWN_OUTPUT
        shot = Path(_link(b.tool("browser_take_screenshot"), "Screenshot of viewport"))
        assert shot.parent == roots[1] / OWN_OUTPUT
        with pytest.raises(ToolError, match="File access denied"):
            b.tool("browser_set_storage_state", filename=str(saved))
        assert NO_COOKIES in b.tool("browser_cookie_list")
        assert not (own.output_dir / OWN_OUTPUT).exists()


def _link(text: str, label: str) -> str:
    """The file a tool's answer links as ``[label](path)``."""
    start = text.index(f"[{label}](") + len(label) + 3
    return text[start : text.index(")", start)]


def test_browser_close_ends_only_its_own_context(worker: IsolatedWorker, pages: str) -> None:
    with worker.sessions(2) as (a, b):
        for session, value in ((a, "AAA"), (b, "BBB")):
            session.tool("browser_navigate", url=f"{pages}/second")
            write_state(session, value)
        browser = worker.browser()
        assert "No open tabs" in a.tool("browser_close")
        assert worker.browser() == browser
        snapshot = b.tool("browser_snapshot")
        assert "This is the second page" in snapshot
        assert read_state(b) == state_of("BBB")
        # A's session lives on, in a new context: what it held went with the old one.
        a.tool("browser_navigate", url=f"{pages}/second")
        assert read_state(a) == CLEAN
        assert worker.browser() == browser


def test_a_deleted_session_takes_its_context_and_the_last_one_the_browser(worker: IsolatedWorker, pages: str) -> None:
    with worker.session() as b:
        b.tool("browser_navigate", url=f"{pages}/second")
        write_state(b, "BBB")
        browser = worker.browser()
        before = worker.renderers()
        with worker.session() as a:
            a.tool("browser_navigate", url=f"{pages}/second")
            write_state(a, "AAA")
            a.tool("browser_tabs", action="new", url=f"{pages}/workers")
            of_a = worker.renderers() - before
            assert of_a, "A's pages run in renderers of their own"
            ended = a.session_id
            assert a.end() == 200
            # A context's renderers belong to it alone: they go when it closes.
            wait_for(lambda: all(dead(pid) for pid in of_a))
            assert worker.renderers() == before
            gone = a.post({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, **{"mcp-session-id": str(ended)})
            assert gone.status_code == 404
        assert worker.browser() == browser
        assert "This is the second page" in b.tool("browser_snapshot")
        assert read_state(b) == state_of("BBB")
        with worker.session() as c:
            c.tool("browser_navigate", url=f"{pages}/second")
            assert read_state(c) == CLEAN
            assert "- 1:" not in c.tool("browser_tabs", action="list")
    # No session left on the worker: its browser closes, node stays.
    wait_for(lambda: dead(browser) and not worker.browsers())
    assert not dead(worker.pid)


def test_tools_for_a_per_session_restore(worker: IsolatedWorker, pages: str) -> None:
    """A resumed session's state goes back into its own context only, by Playwright code."""
    with worker.sessions(2) as (a, b):
        listed = {tool["name"] for tool in a.request("tools/list")["result"]["tools"]}
        assert listed >= RESTORE_TOOLS, RESTORE_TOOLS - listed
        assert "browser_run_code" not in listed  # 0.0.83 has only the _unsafe name
        origin = pages.rstrip("/")
        a.tool(
            "browser_run_code_unsafe",
            code="async (page) => { await page.context().addCookies("
            f"[{{name: 'token', value: 'restored', url: '{origin}'}}]); }}",
        )
        a.tool("browser_navigate", url=f"{pages}/second")
        assert read_state(a)["cookie"] == "token=restored"
        b.tool("browser_navigate", url=f"{pages}/second")
        assert read_state(b) == CLEAN


def test_concurrent_first_calls_launch_one_browser_and_storage_state_seeds_each_session(
    tmp_path: Path, chromium: str, pages: str
) -> None:
    """A fresh worker: the sessions' first calls race to launch the browser. ``--storage-state``
    is the worker's, given to every new context alike and never written back."""
    seed = tmp_path / "seed.json"
    seed_text = json.dumps(
        {
            "cookies": [
                {"name": "token", "value": "seeded", "domain": "127.0.0.1", "path": "/", "expires": -1,
                 "httpOnly": False, "secure": False, "sameSite": "Lax"},
            ],
            "origins": [{"origin": pages, "localStorage": [{"name": "k", "value": "seeded"}]}],
        }
    )  # fmt: skip
    seed.write_text(seed_text)
    with IsolatedWorker(tmp_path / "w", chromium, ["--storage-state", str(seed)]) as fresh:
        assert not fresh.browsers()
        with fresh.sessions(CONCURRENT_SESSIONS) as sessions, BrowserWatch(fresh) as watch:
            start = threading.Barrier(CONCURRENT_SESSIONS)
            answers: list[str | BaseException] = []

            def first_call(session: Session) -> None:
                start.wait()
                try:
                    answers.append(session.tool("browser_navigate", url=f"{pages}/get"))
                except BaseException as exc:
                    answers.append(exc)

            threads = [threading.Thread(target=first_call, args=(s,)) for s in sessions]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert all(isinstance(a, str) and "cookie=seeded storage=seeded" in a for a in answers), answers
            browser = fresh.browser()
            # Every session's page is a renderer of that one browser: contexts never share one.
            assert len(fresh.renderers()) >= CONCURRENT_SESSIONS
            write_state(sessions[0], "changed")
            with fresh.session() as late:
                late.tool("browser_navigate", url=f"{pages}/second")
                assert read_state(late) == {"cookie": "token=seeded", "local": "seeded", "session": None}
        assert watch.seen == {browser}
        assert seed.read_text() == seed_text
