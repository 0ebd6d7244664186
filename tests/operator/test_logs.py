"""`serve --log-format json`: every line is a JSON object; lifecycle and call lines carry keys."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from router.operator.logs import JsonFormatter
from tests.support import FAKE_WORKER, RawClient, free_port, seed_token, wait_for


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def test_json_log_lines_tell_the_story_of_a_session(state_dir: Path) -> None:
    port = free_port()
    argv = [
        sys.executable, "-m", "router.cli", "serve", "--port", str(port), "--state-dir", str(state_dir),
        "--worker-command", f"{sys.executable} {FAKE_WORKER} {{port}}", "--log-format", "json",
    ]
    seed_token(state_dir)
    server = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        wait_for(lambda: _up(port) or server.poll() is not None)
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        with RawClient(f"http://127.0.0.1:{port}/mcp") as c:
            c.initialize()
            assert c.text("echo", text="logged") == "logged"
            ref_id = c.call("echo", text="again")["result"]["_meta"]["mcp-router/refId"]
            c.delete()
            session_id = c.session_id
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line parses
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
    mine = [line for line in lines if line.get("session") == session_id]
    assert any(line["msg"].startswith("session opened") for line in mine)
    assert any(line["msg"].startswith("session ended") for line in mine)
    calls = [line for line in mine if line["logger"] == "mcp_router.calls"]
    assert len(calls) == 2
    call = next(line for line in calls if line["ref_id"] == ref_id)
    assert call["tool"] == "echo" and call["status"] == "success" and call["duration_ms"] >= 0


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
