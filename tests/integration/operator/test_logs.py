"""`serve --log-format json`: every line is a JSON object; lifecycle and call lines carry keys."""

from __future__ import annotations

import json
import logging
import shlex
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.operator.logs import (
    QUIET_LOGGERS,
    TEXT_FORMAT,
    JsonFormatter,
    TextFormatter,
    configure_logging,
)
from tests.support import FAKE_WORKER, RawClient, ref_of, serve_process, wait_for
from tests.support.routers import RouterThread, router_settings
from workers.orphans import processes_for


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def test_json_log_lines_tell_the_story_of_a_session(state_dir: Path) -> None:
    # A worker command on the command line is shell-split and wins over the environment's (-u tells).
    worker = ("--worker-command", shlex.join([sys.executable, "-u", str(FAKE_WORKER), "{port}"]))
    with serve_process(state_dir, *worker, "--log-format", "json") as server, RawClient(server.url) as c:
        c.initialize()
        c.start_worker()
        [pid] = processes_for(state_dir, c.session_id)
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1] == b"-u"
        assert c.text("echo", text="logged") == "logged"
        ref_id = ref_of(c.call("echo", text="again"))
        c.delete()
        session_id = c.session_id
    assert server.proc.returncode is not None  # stopped: its log is complete
    lines = [json.loads(line) for line in server.stderr().splitlines() if line.strip()]  # every line parses
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
    mine = [line for line in lines if line.get("session") == session_id]
    assert any(line["msg"].startswith("session opened") for line in mine)
    assert any(line["msg"].startswith("session ended") for line in mine)
    calls = [line for line in mine if line["logger"] == "mcp_router.calls"]
    assert [c["tool"] for c in calls] == ["whoami", "echo", "echo"]  # one line per client call
    assert any(line["msg"].startswith("worker attached") for line in mine)
    call = next(line for line in calls if line["ref_id"] == ref_id)
    assert call["tool"] == "echo" and call["status"] == "success" and call["duration_ms"] >= 0
    # The router's own requests to the worker are not a line each.
    assert not [line for line in lines if line["logger"] in QUIET_LOGGERS], lines


def test_json_formatter_lifts_ids_from_text() -> None:
    def fmt(msg: str, *args: Any, **extra: Any) -> dict[str, Any]:
        record = logging.LogRecord("mcp_router.sessions", logging.INFO, __file__, 1, msg, args, None)
        record.__dict__.update(extra)
        parsed: dict[str, Any] = json.loads(JsonFormatter().format(record))
        return parsed

    line = fmt("spawn failed session=%s: %s", "abc_DEF-1", "boom")
    assert line["session"] == "abc_DEF-1" and "ref_id" not in line
    assert fmt("call session=s1 ref=1234-abcd tool=x")["ref_id"] == "1234-abcd"
    assert fmt("session opened session=s1", session="explicit")["session"] == "explicit"
    assert "session" not in fmt("router started")


@pytest.fixture
def restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level, {n: logging.getLogger(n).level for n in QUIET_LOGGERS}
    yield
    root.handlers[:], level, quiet = saved
    root.setLevel(level)
    for name, lvl in quiet.items():
        logging.getLogger(name).setLevel(lvl)


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(("level", "shown"), [("info", False), ("warning", False), ("debug", True)])
def test_requests_to_workers_are_logged_at_debug_only(
    level: str, shown: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(level, "text")
    logging.getLogger("httpx").info('HTTP Request: POST http://127.0.0.1:20001/mcp "HTTP/1.1 200 OK"')
    logging.getLogger("httpcore.http11").debug("send_request_headers.started")
    logging.getLogger("httpx").warning("a warning still shows")
    err = capsys.readouterr().err
    assert ("HTTP Request" in err) is shown
    assert ("send_request_headers" in err) is shown
    assert "a warning still shows" in err


@pytest.mark.parametrize("created", [1_700_000_000.0, 1_700_000_000.999, 1_700_000_001.0005, 1_700_000_000.5])
def test_text_lines_keep_loggings_own_timestamp(created: float) -> None:
    # The date is formatted once a second; a line still reads as logging's default formatter has it,
    # going back in time included (the records above are out of order on purpose).
    ours = TextFormatter()
    for when in (created - 1.25, created):
        record = logging.LogRecord("mcp_router.calls", logging.INFO, __file__, 1, "call tool=%s", ("x",), None)
        record.created, record.msecs = when, (when - int(when)) * 1000
        assert ours.format(record) == logging.Formatter(TEXT_FORMAT).format(record)


def test_a_calls_log_line_and_count_come_after_its_answer(state_dir: Path) -> None:
    # Both are written once the client has its answer: they are not on the answer's path.
    happened: list[str] = []

    class Note(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            happened.append(f"log {record.getMessage().split(' tool=')[1].split()[0]}")

    router = RouterThread(router_settings(state_dir, record=True))

    def noting(app: Any) -> Any:
        async def noted(scope: Any, receive: Any, send: Any) -> None:
            async def note_answer(message: Any) -> None:
                await send(message)
                if message["type"] == "http.response.body" and scope["type"] == "http" and scope["method"] == "POST":
                    happened.append("answer")

            await app(scope, receive, note_answer)

        return noted

    router.server.config.app = noting(router.server.config.app)
    calls = logging.getLogger("mcp_router.calls")
    handler, level = Note(), calls.level
    calls.addHandler(handler)
    calls.setLevel(logging.INFO)
    try:
        with router, RawClient(router.url, token=router.token) as c:
            c.initialize()
            happened.clear()
            assert c.text("echo", text="first") == "first"
            assert c.text("echo", text="second") == "second"
            metrics = c.http.get(f"{router.base_url}/metrics").text
    finally:
        calls.removeHandler(handler)
        calls.setLevel(level)
    calls_made = [h for h in happened if h.startswith("log")]
    assert calls_made == ["log echo", "log echo"]  # once each
    assert happened.index("log echo") > happened.index("answer")
    assert happened[-1] == "log echo" and happened[-2] == "answer"
    assert 'mcp_router_tool_calls_total{status="success",tool="echo"} 2.0' in metrics


def test_a_calls_answer_reaches_the_client_before_its_log_line_is_written(state_dir: Path) -> None:
    # The line is written once the answer's bytes have left, not merely been handed to uvicorn
    # (its writes of one loop turn leave together at the turn's end): a handler that waits for
    # the client to have the answer finds it there. Had the line come first, the answer would
    # still be in the router when the handler gave up waiting.
    answered = threading.Event()
    waited: list[bool] = []

    class WaitsForTheClient(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("call "):
                waited.append(answered.wait(timeout=10))

    calls = logging.getLogger("mcp_router.calls")
    handler, level = WaitsForTheClient(), calls.level
    try:
        with RouterThread(router_settings(state_dir, record=True)) as router, RawClient(
            router.url, token=router.token
        ) as c:
            c.initialize()
            calls.addHandler(handler)
            calls.setLevel(logging.INFO)
            assert c.text("echo", text="out first") == "out first"
            answered.set()
            wait_for(lambda: len(waited) == 1)
    finally:
        calls.removeHandler(handler)
        calls.setLevel(level)
    assert waited == [True]
