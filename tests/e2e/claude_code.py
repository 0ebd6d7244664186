"""A Claude-Code-shaped MCP client for the tests: claude_code_client.mjs (the TypeScript SDK, with
the capabilities, GET stream and habits of Claude Code 2.1.328) as a long-running node process,
driven over stdin/stdout JSON lines. Also a direct @playwright/mcp worker to compare against.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import httpx

from tests.support import ROOT, TEST_TOKEN, spare_port, wait_for
from tests.support.worker_process import WorkerProcess, without_pair
from workers.spec import CAPS_FLAG, ROUTER_CAPS, WorkerSpec, default_cli_path, playwright_argv

SCRIPT: Final = Path(__file__).with_name("claude_code_client.mjs")
SDK_DIST: Final = ROOT / "workers" / "node_modules" / "@modelcontextprotocol" / "sdk" / "dist"
READY_TIMEOUT: Final = 30.0  # discover + initialize through a router that may spawn a worker
CALL_TIMEOUT: Final = 120.0  # Claude Code has none of its own; a test that cares asks for less
COMMAND_TIMEOUT: Final = 10.0  # status, quit: answered locally by the node process
REPLY_MARGIN: Final = 5.0  # the node side times a call out first; we wait a little longer
EXIT_TIMEOUT: Final = 5.0
DIRECT_WORKER_SESSION: Final = "direct-worker"
# Tools the router answers itself, and the flags of the capability it adds for its own use.
ROUTER_TOOLS: Final = frozenset({"get_content", "get_console_content", "create_new_session"})
ROUTER_CAPS_ARGS: Final = (CAPS_FLAG, ",".join(ROUTER_CAPS))  # what the router adds for itself


class ClientError(AssertionError):
    """The client process failed a command, died, or did not answer in time."""


class ClaudeCodeClient:
    """``with ClaudeCodeClient(url) as cc: text, seconds = cc.call("browser_navigate", url=...)``.

    Exiting (or ``quit()``) ends the client the way Claude Code does: no DELETE. The node process
    runs in its own process group, which is killed on the way out whatever happened.
    """

    def __init__(
        self, url: str, *, token: str | None = TEST_TOKEN, ready_timeout: float = READY_TIMEOUT,
        conversation: str | None = None,
    ) -> None:
        self.url = url
        self.token = token
        self.conversation = conversation  # sent on every request (the router reads it on initialize)
        self.ready_timeout = ready_timeout
        self.ready: dict[str, Any] = {}
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._next_id = 0
        self._reader: threading.Thread | None = None
        self._eof = False

    # -- life cycle ------------------------------------------------------------------------------

    def __enter__(self) -> ClaudeCodeClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        assert SDK_DIST.exists(), "the TypeScript SDK is missing: scripts/setup runs npm ci in workers/"
        env = {k: v for k, v in os.environ.items() if k not in ("CC_TOKEN", "CC_CONVERSATION")}
        if self.token is not None:
            env["CC_TOKEN"] = self.token  # not argv: that is readable by every local user
        if self.conversation is not None:
            env["CC_CONVERSATION"] = self.conversation
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 -- outlives this method; close() closes it
        self._proc = subprocess.Popen(
            ["node", str(SCRIPT), str(SDK_DIST), self.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.ready = self._wait_reply(-1, self.ready_timeout, "ready")
        except BaseException:
            self.close()
            raise

    def quit(self) -> dict[str, Any]:
        """Ends the client without DELETE; returns its last status."""
        reply = self._command("quit", COMMAND_TIMEOUT)
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=EXIT_TIMEOUT)
        self.close()
        status: dict[str, Any] = reply["status"]
        return status

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=EXIT_TIMEOUT)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._reader is not None:
            self._reader.join(timeout=EXIT_TIMEOUT)
            self._reader = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # -- commands --------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        value = self.ready.get("session_id")
        assert isinstance(value, str), self.ready
        return value

    def call(self, name: str, /, timeout: float = CALL_TIMEOUT, **arguments: Any) -> tuple[str, float]:
        """Calls a tool; returns its text and how long it took (seconds, as the client saw it).
        A tool answer with isError is returned too (its text says why); a JSON-RPC error or no
        answer within ``timeout`` raises ClientError."""
        reply = self.call_raw(name, arguments, timeout=timeout)
        return str(reply["text"]), float(reply["seconds"])

    def call_raw(self, name: str, arguments: dict[str, Any], *, timeout: float = CALL_TIMEOUT) -> dict[str, Any]:
        """The whole answer: text, is_error, seconds and the SDK's result object."""
        return self._command(
            "call", timeout + REPLY_MARGIN, name=name, arguments=arguments, timeout_ms=int(timeout * 1000)
        )

    def list_tools(self, timeout: float = CALL_TIMEOUT) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = self._command("list_tools", timeout + REPLY_MARGIN,
                                                    timeout_ms=int(timeout * 1000))["tools"]  # fmt: skip
        return tools

    def status(self) -> dict[str, Any]:
        """Counters of the client: pings_answered, roots_list_answered, get_stream_open, get_opens,
        requests_seen ({"ping@get": n, "roots/list@post": n, …}), deletes, session_id, events, …"""
        status: dict[str, Any] = self._command("status", COMMAND_TIMEOUT)["status"]
        return status

    def wait_status(
        self, condition: Callable[[dict[str, Any]], Any], timeout: float, what: str = "condition"
    ) -> dict[str, Any]:
        """Polls status() until ``condition(status)`` holds; the last status goes in the failure."""
        last: dict[str, Any] = {}

        def check() -> bool:
            nonlocal last
            last = self.status()
            return bool(condition(last))

        try:
            wait_for(check, timeout=timeout, interval=0.1)
        except AssertionError:
            raise ClientError(f"{what}: not within {timeout}s; client status: {_brief(last)}") from None
        return last

    # -- plumbing --------------------------------------------------------------------------------

    def _command(self, cmd: str, timeout: float, **fields: Any) -> dict[str, Any]:
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise ClientError("the client is not running")
        with self._cond:
            self._next_id += 1
            request_id = self._next_id
        try:
            proc.stdin.write(json.dumps({"id": request_id, "cmd": cmd, **fields}) + "\n")
            proc.stdin.flush()
        except OSError as exc:
            raise ClientError(f"the client is gone ({exc}); stderr: {self.stderr_tail()}") from None
        reply = self._wait_reply(request_id, timeout, cmd)
        if not reply.get("ok"):
            context = f"; client status: {_brief(self.status())}" if cmd == "call" else ""
            raise ClientError(f"{cmd} {fields.get('name', '')} failed: {reply.get('error')}{context}")
        return reply

    def _wait_reply(self, request_id: int, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while request_id not in self._replies:
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    state = "exited" if self._eof else f"no answer within {timeout:.0f}s"
                    raise ClientError(f"{what}: the client {state}; stderr: {self.stderr_tail()}")
                self._cond.wait(left)
            reply = self._replies.pop(request_id)
        if "fatal" in reply:
            raise ClientError(f"the client could not connect: {reply['fatal']}")
        return reply

    def _read(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a stray print from a library: not ours
            key = -1 if ("ready" in message or "fatal" in message) else message.get("id")
            if isinstance(key, int):
                with self._cond:
                    self._replies[key] = message
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-limit:]


def _brief(status: dict[str, Any]) -> str:
    keep = {k: v for k, v in status.items() if k != "events"}
    keep["last_events"] = status.get("events", [])[-12:]
    return json.dumps(keep)


# -- a direct worker, for parity -----------------------------------------------------------------


class DirectWorker(WorkerProcess):
    """@playwright/mcp run as the router would run it, minus the capabilities the router adds for
    itself (storage, network): what a user running Playwright MCP alone gets. ``url`` uses the host name
    the worker accepts (``localhost:<port>``)."""

    def __init__(self, state_dir: Path, browser: str) -> None:
        self.port = spare_port()
        spec = WorkerSpec(argv_template=without_pair(playwright_argv(), ROUTER_CAPS_ARGS))
        argv = spec.render(
            port=self.port,
            output_dir=state_dir / "direct" / "out",
            profile_dir=state_dir / "direct" / "profile",
            browser=browser,
            cli=str(default_cli_path()),
        )
        super().__init__(
            argv, url=f"http://localhost:{self.port}/mcp", state_dir=state_dir, marker_session=DIRECT_WORKER_SESSION
        )

    def __enter__(self) -> DirectWorker:
        super().__enter__()
        return self


# -- a router in a process of its own, to SIGKILL -------------------------------------------------

ROUTER_START_TIMEOUT: Final = 20.0


def router_healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


