"""The client's roots outlive a restart of the router: Claude Code's shape (roots declared, its GET
stream held, never a DELETE) after the router went away and came back, its first call arriving
before its GET stream is back. The worker that call brings up asks ``roots/list`` with no client
stream to carry it; the router answers it from ``session.json`` with the roots the client gave
the previous run, not with none (@playwright/mcp would take its own cwd for the project).

The stand-in worker's ``roots`` tool asks the client's roots and answers with their URIs; the
client's stream (tests/integration/router/test_session_stream.py ``HeldStream``) answers the router's own
question with ``file:///<tag>/router``, the worker's with ``file:///<tag>/<n>``.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import pytest

from router.layout import StateLayout
from router.sessions import statefiles
from router.sessions.roots import ROOTS_CHANGED
from router.sessions.table import Session, State
from tests.integration.router.test_session_stream import HeldStream
from tests.support import RawClient, ServeProcess, serve_process, spare_port, wait_for
from tests.support.roots_client import CC_PARAMS, cc_session
from workers.health import RestartBudget
from workers.orphans import processes_for

IDLE: Final = "1"  # seconds: the pause past the idle timeout
QUIET: Final = ("--log-level", "warning", "--idle-timeout", IDLE, "--resume-reserve", "0")
TAG: Final = "project"
KNOWN: Final = f"file:///{TAG}/router"  # the client's answer to the router's own roots/list
SAVED_WITHIN: Final = 10.0
WORKER_GONE: Final = 15.0
RETENTION: Final = 3600.0


def roots_on_disk(state: Path, session_id: str) -> Any:
    data = statefiles.read_session_file(StateLayout(state).session_dir(session_id))
    return None if data is None else data.get("roots")


def uris(roots: Any) -> list[str]:
    return [r["uri"] for r in roots] if isinstance(roots, list) else []


@contextmanager
def claude_code(url: str) -> Iterator[tuple[RawClient, HeldStream]]:
    """A session in Claude Code's shape: initialized, its GET stream held, the router's own
    ``roots/list`` answered on it. Never DELETEd."""
    with cc_session(url) as client:
        stream = HeldStream(url, client.session_id or "", TAG).start()
        try:
            yield client, stream
        finally:
            stream.join()  # the router's end ends it


def kill(server: ServeProcess) -> None:
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(timeout=10)


def test_a_session_paused_past_the_idle_timeout_gets_its_roots_after_a_restart(state_dir: Path) -> None:
    """Claude Code's conversation: a call, a pause (the worker reaped), the router killed and
    started again, the next call before the client's stream is back."""
    port = spare_port()
    with serve_process(state_dir, *QUIET, port=port) as server, claude_code(server.url) as (client, stream):
        sid = client.session_id or ""
        assert client.text("roots") == f"file:///{TAG}/1"  # the worker asked the client itself
        wait_for(lambda: stream.router_asked == 1, timeout=SAVED_WITHIN)
        wait_for(lambda: not processes_for(state_dir, sid), timeout=WORKER_GONE)  # reaped
        kill(server)

    with serve_process(state_dir, *QUIET, port=port) as server, RawClient(server.url) as again:
        again.session_id = sid
        # No GET stream: the new worker's roots/list is answered by the router, with what the
        # client gave the previous run.
        assert again.text("roots") == KNOWN
        # The client's stream comes back: the router asks again (the roots may have changed).
        back = HeldStream(server.url, sid, "moved").start()
        wait_for(lambda: back.router_asked == 1, timeout=SAVED_WITHIN)
        wait_for(lambda: uris(roots_on_disk(state_dir, sid)) == ["file:///moved/router"], timeout=SAVED_WITHIN)
    back.join()


def test_roots_answered_before_any_worker_survive_a_kill(state_dir: Path) -> None:
    """The client's answer is written when it comes, not at the next dormancy: a router killed
    before the session ever had a worker still knows them."""
    port = spare_port()
    with serve_process(state_dir, *QUIET, port=port) as server, claude_code(server.url) as (client, stream):
        sid = client.session_id or ""
        wait_for(lambda: uris(roots_on_disk(state_dir, sid)) == [KNOWN], timeout=SAVED_WITHIN)
        assert stream.router_asked == 1
        kill(server)

    with serve_process(state_dir, *QUIET, port=port) as server, RawClient(server.url) as again:
        again.session_id = sid
        assert again.text("roots") == KNOWN


def test_changed_roots_replace_the_saved_ones(state_dir: Path) -> None:
    """``notifications/roots/list_changed``: the router asks again, and the file holds the new
    roots, which the first worker after a restart gets."""
    port = spare_port()
    with serve_process(state_dir, *QUIET, port=port) as server, claude_code(server.url) as (client, stream):
        sid = client.session_id or ""
        wait_for(lambda: uris(roots_on_disk(state_dir, sid)) == [KNOWN], timeout=SAVED_WITHIN)
        stream.tag = "elsewhere"  # the client's project changed
        assert client.post({"jsonrpc": "2.0", "method": ROOTS_CHANGED}).status_code == 202
        wait_for(lambda: uris(roots_on_disk(state_dir, sid)) == ["file:///elsewhere/router"], timeout=SAVED_WITHIN)
        kill(server)

    with serve_process(state_dir, *QUIET, port=port) as server, RawClient(server.url) as again:
        again.session_id = sid
        assert again.text("roots") == "file:///elsewhere/router"


# -- the file --------------------------------------------------------------------------------------


def answer(session: Session, uri: str) -> None:
    """The client answers the router's next ``roots/list`` (after a change) with ``uri``."""
    session.roots.changed()
    question = session.roots.question()
    assert question is not None
    assert session.roots.take_answer(question["id"], {"result": {"roots": [{"uri": uri}]}})


def test_the_same_roots_again_write_nothing(tmp_path: Path) -> None:
    """Answered again with the same roots (each GET stream asks, and after each change), the file
    is not rewritten: the roots' write happens once per change."""
    session = Session("s" * 20, initialize_params=CC_PARAMS)
    session_dir = StateLayout(tmp_path).session_dir(session.id)
    path = session_dir / statefiles.SESSION_FILE
    statefiles.keep_session(session_dir, session)
    path.unlink()
    answer(session, "file:///p")
    assert uris(roots_on_disk(tmp_path, session.id)) == ["file:///p"]
    path.unlink()
    answer(session, "file:///p")
    assert not path.exists(), "the same roots written again"
    answer(session, "file:///q")
    assert uris(roots_on_disk(tmp_path, session.id)) == ["file:///q"]


def test_an_ended_session_gets_no_file_back(tmp_path: Path) -> None:
    """An answer arriving after the session ended (DELETE) must not bring its file back: the id
    would be taken up again after a restart."""
    layout = StateLayout(tmp_path)
    session = Session("e" * 20, initialize_params=CC_PARAMS)
    session_dir = layout.session_dir(session.id)
    statefiles.keep_session(session_dir, session)
    question = session.roots.question()
    assert question is not None
    session.state = State.CLOSED
    statefiles.forget_session_file(session_dir)
    session.roots.take_answer(question["id"], {"result": {"roots": [{"uri": "file:///p"}]}})
    assert not (session_dir / statefiles.SESSION_FILE).exists()


GARBLED: Final = [
    pytest.param("not json at all", id="not-json"),
    pytest.param("[" * 100_000 + "]" * 100_000, id="nested-too-deep"),
    pytest.param(json.dumps({"roots": "file:///p"}), id="roots-a-string"),
    pytest.param(json.dumps({"roots": [1, 2]}), id="roots-not-objects"),
    pytest.param(json.dumps({"roots": [{"uri": 5}]}), id="root-without-a-uri"),
    pytest.param(json.dumps({"roots": [{"uri": "file:///p"}], "created": "yesterday"}), id="created-a-string"),
    pytest.param(json.dumps({"last_active": int("9" * 400), "created": int("9" * 400)}), id="times-too-large"),
]


@pytest.mark.parametrize("text", GARBLED)
def test_a_garbled_session_file_reads_as_absent(tmp_path: Path, text: str) -> None:
    layout = StateLayout(tmp_path)
    sid = "g" * 20
    session_dir = layout.session_dir(sid)
    session_dir.mkdir(parents=True)
    (session_dir / statefiles.SESSION_FILE).write_text(text)
    assert statefiles.last_active(session_dir) > 0  # the file's mtime: retention still works
    session = statefiles.session_from_disk(layout, sid, RETENTION, RestartBudget())
    if session is not None:
        roots = json.loads(text).get("roots") if text.startswith("{") else None
        expected = roots if roots == [{"uri": "file:///p"}] else None
        assert session.roots.known == expected
        assert session.created > 0


def test_a_router_starts_over_a_garbled_session_file(state_dir: Path) -> None:
    """Start-up reads every session file (retention): one the router cannot read is absent."""
    sid = "h" * 20
    session_dir = StateLayout(state_dir).session_dir(sid)
    session_dir.mkdir(parents=True)
    (session_dir / statefiles.SESSION_FILE).write_text("[" * 100_000 + "]" * 100_000)
    with serve_process(state_dir, *QUIET) as server, RawClient(server.url) as client:
        client.session_id = sid
        assert client.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).status_code == 404
        assert server.healthy()
