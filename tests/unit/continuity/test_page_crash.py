"""A page that crashed under a live worker (router/sessions/page_crash.py): told by Playwright's
error for a call on it, or by the blank tab and console entry it put in its place, whichever MCP
session on the worker met it first; the client's page stays the one to restore, a save puts it
back in place of the blank tab, and the worker is marked for ending; a call that met it goes once
more. (Through the real worker: tests/e2e/test_page_crash.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from router.http.exchange import Exchange, ExchangeHooks
from router.http.worker_faults import crashed_page_under
from router.layout import StateLayout
from router.protocol.messages import parse
from router.record.ref_ids import RefIds
from router.record.snapshots import summarize
from router.sessions import statefiles
from router.sessions.control import ControlSession
from router.sessions.page_crash import CRASH_RESET, TARGET_CRASHED, lost_page, put_back
from router.sessions.resume_notice import on_tool_answer
from router.sessions.state_save import BrowserStateSaver
from router.sessions.table import Session
from router.upstream.client import UpstreamResponse
from router.upstream.connection import WorkerConnection
from tests.support.saved import SavingControl

PAGE = "http://127.0.0.1:8000/app"
BLANK = "about:blank"
STACK = "    at _Tab.logErrorMessage (coreBundle.js:66471:62)\n    at Context.ensureTab (coreBundle.js:66862:28)\n"


def _console(directory: Path, first_line: str) -> Path:
    path = directory / "console-2026-11-27T22-37-02-829Z.log"
    path.write_text(f"[       1ms] {first_line}\n{STACK}")
    return path


def _reset_answer(console: Path) -> str:
    """Playwright's answer from the blank tab it opened for a crashed page (0.0.83)."""
    return (
        f"### Page\n- Page URL: {BLANK}\n### Snapshot\n```yaml\n\n```\n"
        f"### Events\n- New console entries: {console}#L1-L3"
    )


def _facts(text: str, *, error: bool = False) -> Any:
    return summarize({"content": [{"type": "text", "text": text}], "isError": error})


def _worker(output_dir: Path) -> WorkerConnection:
    worker = SimpleNamespace(alive=lambda: True, output_dir=output_dir, pid=1)
    return cast(WorkerConnection, SimpleNamespace(worker=worker))


def _noted(session: Session, text: str, *, error: bool = False) -> None:
    result = {"content": [{"type": "text", "text": text}], "isError": error}
    on_tool_answer(session, result, summarize(result))


def test_what_tells_a_crashed_page_and_what_does_not(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert lost_page(_facts(_reset_answer(_console(out, f"Error: {CRASH_RESET}"))), out)
    called_on_it = f"### Error\nError: browserBackend.callTool: {TARGET_CRASHED} "
    assert lost_page(_facts(called_on_it, error=True), out)
    # The model's own about:blank (a navigation there, a new tab) has no such entry.
    assert not lost_page(_facts(f"### Page\n- Page URL: {BLANK}\n### Snapshot\n```yaml\n\n```"), out)
    assert not lost_page(_facts(_reset_answer(_console(out, "[ERROR] Uncaught TypeError @ x.js:1"))), out)
    # A page's own console text saying so on a real page is not a crash.
    said = f"### Page\n- Page URL: {PAGE}\n### Events\n- New console entries: {_console(out, CRASH_RESET)}#L1-L1"
    assert not lost_page(_facts(said), out)
    # A link outside the worker's output dir is not read, whatever it holds.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert not lost_page(_facts(_reset_answer(_console(elsewhere, f"Error: {CRASH_RESET}"))), out)


def _payload(text: str, *, error: bool = False) -> bytes:
    answer = {"result": {"content": [{"type": "text", "text": text}], "isError": error}, "jsonrpc": "2.0", "id": 7}
    return json.dumps(answer, separators=(",", ":")).encode()


class _Answered:
    """A worker's whole SSE answer, as the proxy holds it before it is taken."""

    status_code = 200
    content_type = "text/event-stream"
    complete = True

    def __init__(self, payload: bytes) -> None:
        self.body = b"event: message\ndata: " + payload + b"\n\n"
        self.closed = False

    async def settle(self, limit: float) -> None:
        pass

    def peek(self) -> bytes:
        return self.body

    async def aclose(self) -> None:
        self.closed = True


def _call(session: Session) -> Exchange:
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "browser_click", "arguments": {}}}
    hooks = cast(ExchangeHooks, SimpleNamespace(ref_ids=RefIds()))
    return Exchange(hooks, session, parse(json.dumps(call).encode()))


async def test_a_call_whose_answer_met_the_crash_goes_once_more(tmp_path: Path) -> None:
    """What the proxy looks at before an answer leaves (worker_faults.crashed_page_under): the
    call goes once more, its answer closed, if it met the crash, as long as the session had a
    page to lose."""
    session = Session("s" * 20)
    connection = session.connection = _worker(tmp_path)

    async def met(payload: bytes, page: str | None) -> bool:
        session.current_url = page
        answered = _Answered(payload)
        crashed = await crashed_page_under(session, cast(UpstreamResponse, answered), _call(session), 0.0)
        assert answered.closed == (crashed is not None)
        return crashed is connection

    crashed = _payload(f"### Error\nError: browserBackend.callTool: {TARGET_CRASHED} ", error=True)
    reset = _payload(_reset_answer(_console(tmp_path, f"Error: {CRASH_RESET}")))
    assert await met(crashed, PAGE) and await met(reset, PAGE)
    assert not await met(crashed, None) and not await met(reset, BLANK)
    assert not await met(_payload(f"### Page\n- Page URL: {BLANK}"), PAGE)
    assert not await met(_payload(f"### Page\n- Page URL: {PAGE}"), PAGE)
    assert not await met(b"not json " + TARGET_CRASHED.encode(), PAGE)


def test_the_page_goes_back_in_place_of_the_blank_tab_opened_last() -> None:
    other = "http://127.0.0.1:8000/other"
    assert put_back([other, BLANK], PAGE) == [other, PAGE]
    assert put_back([BLANK, other, BLANK], PAGE) == [BLANK, other, PAGE]
    assert put_back([other], PAGE) == [other, PAGE]
    assert put_back([PAGE], PAGE) == [PAGE]


def test_a_clients_answer_from_the_blank_tab_keeps_the_page_and_marks_the_worker(tmp_path: Path) -> None:
    session = Session("s" * 20)
    connection = session.connection = _worker(tmp_path)
    _noted(session, f"### Page\n- Page URL: {PAGE}")
    _noted(session, _reset_answer(_console(tmp_path, f"Error: {CRASH_RESET}")))
    # The next call waits for the resume instead (RequestServing.ensure_worker).
    assert session.current_url == PAGE and session.page_lost_on is connection


def test_a_call_that_met_the_crash_marks_the_worker_too(tmp_path: Path) -> None:
    session = Session("s" * 20)
    connection = session.connection = _worker(tmp_path)
    _noted(session, f"### Page\n- Page URL: {PAGE}")
    _noted(session, f"### Error\nError: browserBackend.callTool: {TARGET_CRASHED} ", error=True)
    assert session.current_url == PAGE and session.page_lost_on is connection


def test_the_models_own_blank_page_is_just_a_page(tmp_path: Path) -> None:
    session = Session("s" * 20)
    session.connection = _worker(tmp_path)
    _noted(session, f"### Page\n- Page URL: {PAGE}")
    _noted(session, f"### Page\n- Page URL: {BLANK}\n### Snapshot\n```yaml\n\n```")
    assert session.current_url == BLANK and session.page_lost_on is None


class CrashedListing(SavingControl):
    """A save's calls to a worker whose page crashed since the last: the listing is the call that
    meets it, so the router's session is the one Playwright tells."""

    def __init__(self, tabs: list[str], console: Path) -> None:
        super().__init__({"cookies": [], "origins": []}, tabs)
        self.console = console

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        listing = await super().call(name, arguments)
        if name != "browser_tabs":
            return listing
        return f"### Result\n{listing}\n### Events\n- New console entries: {self.console}#L1-L3"


async def test_a_save_that_meets_the_crash_keeps_the_page_and_says_so(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path / "state")
    out = tmp_path / "out"
    out.mkdir()
    session = Session("s" * 20, browser_used=True, current_url=PAGE)
    connection = _worker(out)
    told: list[tuple[Session, WorkerConnection]] = []
    saver = BrowserStateSaver(layout)
    saver.on_page_crash = lambda s, c: told.append((s, c))
    other = "http://127.0.0.1:8000/other"
    control = CrashedListing([other, BLANK], _console(out, f"Error: {CRASH_RESET}"))

    await saver.save(session, connection, cast(ControlSession, control))
    state = statefiles.read_state(layout.session_dir(session.id))
    assert state is not None and state["tabs"] == [other, PAGE] and state["current"] == PAGE
    assert session.page_lost_on is connection and told == [(session, connection)]

    # The save that ends the worker lists the blank tab with nothing said (told once): the page
    # still goes back in its place.
    await saver.save(session, connection, cast(ControlSession, SavingControl({"cookies": [], "origins": []}, [BLANK])))
    state = statefiles.read_state(layout.session_dir(session.id))
    assert state is not None and state["tabs"] == [PAGE] and len(told) == 1


async def test_a_blank_tab_the_model_opened_is_saved_as_it_is(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path / "state")
    session = Session("s" * 20, browser_used=True, current_url=BLANK)
    saver = BrowserStateSaver(layout)
    await saver.save(session, _worker(tmp_path), cast(ControlSession, SavingControl({"cookies": []}, [PAGE, BLANK])))
    state = statefiles.read_state(layout.session_dir(session.id))
    assert state is not None and state["tabs"] == [PAGE, BLANK] and session.page_lost_on is None
