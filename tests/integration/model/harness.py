"""The lifecycle model's world: the router as a process it may SIGKILL, its clients, and what it
reads back (``/healthz``, ``/api/sessions``, the record, the worker processes).

Every request has a deadline (``REQUEST_DEADLINE``): a hang fails the example like a wrong answer.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from tests.support.auth import TEST_TOKEN, auth_headers, seed_token
from tests.support.client import ACCEPT_BOTH, REF_KEY
from tests.support.routers import ROOT, STANDIN_WORKER_COMMAND
from tests.support.sse import iter_sse, messages_of
from tests.support.wait import wait_for
from workers.orphans import processes_for

REQUEST_DEADLINE: Final = 20.0  # any request of the model's: longer is a hang
START_TIMEOUT: Final = 20.0
STOP_TIMEOUT: Final = 30.0
# Claude Code reopens a GET stream that ended about a second later (../shared/README.md).
STREAM_REOPEN_S: Final = 1.0
STREAM_OPEN_TIMEOUT: Final = 10.0
STREAM_STALL: Final = 5.0  # ten keep-alive intervals
# The stand-in's pings, as Playwright's (every 3 s, 5 s to answer) but quicker.
WORKER_ENV: Final = {"STANDIN_PING_INTERVAL": "1", "STANDIN_PING_TIMEOUT": "4", "STANDIN_ROOTS_ANSWER_WAIT": "8"}
CC_VERSION: Final = "2025-11-25"
PLAIN_VERSION: Final = "2025-06-18"
BLANK_URL: Final = "about:blank"


def initialize_params(claude_code: bool, name: str) -> dict[str, Any]:
    if claude_code:  # as Claude Code 2.1.328 sends it
        capabilities: dict[str, Any] = {"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}}
        return {
            "protocolVersion": CC_VERSION,
            "capabilities": capabilities,
            "clientInfo": {"name": name, "version": "2.1.332"},
        }
    return {"protocolVersion": PLAIN_VERSION, "capabilities": {}, "clientInfo": {"name": name, "version": "1"}}


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx.Headers
    messages: list[dict[str, Any]]
    text: str

    def only(self) -> dict[str, Any]:
        assert len(self.messages) == 1, self.text
        return self.messages[0]

    def error_body(self) -> dict[str, Any]:
        """The JSON-RPC error every refusal must carry."""
        assert self.headers.get("content-type", "").startswith("application/json"), (self.status, self.text)
        body = json.loads(self.text)
        assert body.get("jsonrpc") == "2.0" and isinstance(body.get("error"), dict), body
        assert isinstance(body["error"].get("code"), int) and body["error"].get("message"), body
        return body


class RouterProcess:
    """`mcp-router serve` with the stand-in worker on a fixed port and state dir, started again
    after a SIGKILL or a SIGTERM on the same ones."""

    def __init__(self, state: Path, port: int, args: list[str], env: dict[str, str] | None = None) -> None:
        self.state = state
        self.env = env or {}
        self.port = port
        self.args = args
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = state.parent / "router.log"
        self.http = httpx.Client(timeout=REQUEST_DEADLINE, trust_env=False, headers=auth_headers())

    def start(self) -> None:
        seed_token(self.state)
        # The stand-in run --isolated when sessions share workers: a browser per MCP session.
        command = [*STANDIN_WORKER_COMMAND, *(["--isolated"] if "--sessions-per-browser" in self.args else [])]
        env = {**os.environ, **WORKER_ENV, **self.env, "MCP_ROUTER_WORKER_COMMAND": json.dumps(command)}
        argv = [sys.executable, "-m", "router.cli", "serve", "--port", str(self.port), "--state-dir", str(self.state)]
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen([*argv, *self.args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=sink)
        proc = self.proc
        wait_for(lambda: proc.poll() is not None or self._healthy(), timeout=START_TIMEOUT)
        # Its first start probes the worker's handshake (one worker spawn) while the model goes on.
        assert proc.poll() is None, f"the router exited with {proc.returncode}:\n{self.log_tail()}"

    def _healthy(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return self.http.get(f"{self.base}/healthz", timeout=1.0).status_code == 200
        return False

    def kill(self) -> None:
        """SIGKILL: no save, no cleanup; its workers live on until the next start sweeps them."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(STOP_TIMEOUT)

    def stop(self) -> int:
        """SIGTERM, as systemd stops it: every live session saved, every worker ended."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"the router did not stop on SIGTERM:\n{self.log_tail()}") from None
        return self.proc.returncode

    def close(self) -> None:
        with contextlib.suppress(AssertionError):
            self.stop()
        self.http.close()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- reading it back ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        answer = self.http.get(f"{self.base}/healthz")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    def idle_hosts(self) -> int:
        """Shared workers that carry no session now (ended after the idle timeout)."""
        answer = self.http.get(f"{self.base}/api/sessions")
        assert answer.status_code == 200, answer.text
        return sum(1 for h in answer.json().get("hosts") or [] if not h["sessions"])

    def api_sessions(self) -> dict[str, dict[str, Any]]:
        answer = self.http.get(f"{self.base}/api/sessions")
        assert answer.status_code == 200, answer.text
        rows = answer.json()
        rows = rows.get("sessions", rows) if isinstance(rows, dict) else rows
        return {row["id"]: row for row in rows}

    def worker_pids(self) -> set[int]:
        """Every process started for this state dir (workers and what they started)."""
        return set(processes_for(self.state))

    def recorded_calls(self) -> dict[str, tuple[int, int]]:
        """ref_id -> (request rows, response rows) of every tools/call in the record."""
        db = self.state / "router.db"
        if not db.exists():
            return {}
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=REQUEST_DEADLINE)
        try:
            requests = conn.execute("SELECT ref_id, COUNT(*) FROM requests WHERE method = 'tools/call' GROUP BY ref_id")
            found = {ref: (n, 0) for ref, n in requests}
            for ref, n in conn.execute("SELECT ref_id, COUNT(*) FROM responses GROUP BY ref_id"):
                if ref in found:
                    found[ref] = (found[ref][0], n)
            return found
        finally:
            conn.close()

    def saved_clicks(self, session_id: str) -> int | None:
        """The clicks cookie in the session's saved browser state, if it has one."""
        try:
            state = json.loads((self.state / "sessions" / session_id / "state.json").read_text())
        except (OSError, ValueError):
            return None
        for cookie in (state.get("storage") or {}).get("cookies", []):
            if cookie.get("name") == "clicks":
                return int(cookie["value"])
        return None


class Client:
    """One conversation's HTTP side: its own keep-alive connection, every status and header seen."""

    def __init__(self, url: str, ids: Iterator[int] | None = None) -> None:
        """``ids``: the session's JSON-RPC ids, when another connection shares them."""
        self.url = url
        self.http = httpx.Client(timeout=REQUEST_DEADLINE, trust_env=False, headers=auth_headers())
        self.session_id: str | None = None
        self.ids = ids or itertools.count(1)

    def post(self, body: Any, *, session_id: str | None = None, raw: bytes | None = None) -> Answer:
        headers = {"content-type": "application/json", "accept": ACCEPT_BOTH}
        sid = session_id if session_id is not None else self.session_id
        if sid is not None:
            headers["mcp-session-id"] = sid
        content = raw if raw is not None else json.dumps(body).encode()
        try:
            response = self.http.post(self.url, content=content, headers=headers)
        except httpx.TimeoutException as exc:
            raise AssertionError(f"no answer within {REQUEST_DEADLINE}s: {body!r}") from exc
        messages = messages_of(response) if response.status_code == 200 else []
        return Answer(response.status_code, response.headers, messages, response.text)

    def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[int, Answer]:
        request_id = next(self.ids)
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        return request_id, self.post(body)

    def call(self, tool: str, **arguments: Any) -> Answer:
        return self.request("tools/call", {"name": tool, "arguments": arguments})[1]

    def delete(self) -> Answer:
        headers = {"mcp-session-id": self.session_id or ""}
        response = self.http.delete(self.url, headers=headers)
        return Answer(response.status_code, response.headers, [], response.text)

    def close(self) -> None:
        self.http.close()


def tool_text(message: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in message["result"]["content"])


def ref_id(message: dict[str, Any]) -> str:
    return str(message["result"]["_meta"][REF_KEY])


@dataclass
class StreamLog:
    opened: int = 0  # GETs answered 200
    ended: int = 0  # streams that ended (the router's doing, or ours)
    refused: list[int] = field(default_factory=list)  # statuses of GETs not answered 200
    taken_over: int = 0  # take-overs done: the new stream open and the old one ended by the router
    roots_asked: int = 0
    pings: int = 0


class GetStream:
    """A client's GET stream, in a thread: roots/list answered with ``project`` (when it has one)
    and pings answered, each by a POST of its own. With ``reopen`` (Claude Code's habit) a stream
    that ends is reopened about a second later on the same id, without Last-Event-ID; a 404 ends
    that (the session is gone). ``take_over()`` opens a second GET while the first is open, as a
    client that gave up on its stream does: the router must end the first.

    The router sends a keep-alive comment every ``MCP_ROUTER_KEEPALIVE_INTERVAL`` (short here), so
    a stream silent for ``STREAM_STALL`` seconds is a stall, counted in ``log.refused`` as 0."""

    def __init__(self, url: str, session_id: str, project: Path | None, *, reopen: bool) -> None:
        self.url = url
        self.session_id = session_id
        self.project = project
        self.reopen = reopen
        self.log = StreamLog()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._opened = threading.Event()
        self._take_over = threading.Event()
        self._http = httpx.Client(timeout=httpx.Timeout(REQUEST_DEADLINE, read=STREAM_STALL), trust_env=False)
        self._answers = httpx.Client(timeout=REQUEST_DEADLINE, trust_env=False, headers=auth_headers())
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> GetStream:
        self._thread.start()
        return self

    def wait_open(self) -> bool:
        """Whether a stream was answered 200 (False: refused, e.g. 404)."""
        assert self._opened.wait(STREAM_OPEN_TIMEOUT), "the GET stream was neither opened nor refused"
        return self.log.opened > 0

    def take_over(self) -> int:
        """Asks for a take-over; returns the count ``log.taken_over`` reaches once it is done."""
        with self._lock:
            done = self.log.taken_over + 1
        self._take_over.set()
        return done

    def _open(self) -> httpx.Response | None:
        headers = {"accept": "text/event-stream", "mcp-session-id": self.session_id, **auth_headers(TEST_TOKEN)}
        try:
            response = self._http.send(self._http.build_request("GET", self.url, headers=headers), stream=True)
        except httpx.HTTPError:
            self.log.refused.append(-1)  # the router is not there (restarting)
            return None
        if response.status_code != 200:
            self.log.refused.append(response.status_code)
            response.close()
            return None
        with self._lock:
            self.log.opened += 1
        return response

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                response = self._open()
                self._opened.set()
                if self._take_over.is_set():  # nothing was open to take over from
                    self._take_over.clear()
                    with self._lock:
                        self.log.taken_over += 1
                while response is not None:
                    response = self._follow(response)
                if not self.reopen or (self.log.refused and self.log.refused[-1] == 404):
                    return
                self._stop.wait(STREAM_REOPEN_S)
        finally:
            self._opened.set()

    def _follow(self, response: httpx.Response) -> httpx.Response | None:
        """Reads ``response`` to its end; returns the stream that took over from it, if any."""
        new: httpx.Response | None = None
        try:
            for event in iter_sse(response):
                if self._stop.is_set():
                    break
                if self._take_over.is_set() and new is None:
                    self._take_over.clear()
                    new = self._open()
                if "id" in event and event.get("method") in ("roots/list", "ping"):
                    self._answer(event)
        except httpx.ReadTimeout:
            self.log.refused.append(0)
        except httpx.HTTPError:
            pass  # the router went away (killed, restarting)
        finally:
            response.close()
            with self._lock:
                self.log.ended += 1
                if new is not None:
                    self.log.taken_over += 1
        return new

    def _answer(self, request: dict[str, Any]) -> None:
        result: dict[str, Any] = {}
        if request["method"] == "roots/list":
            roots = [] if self.project is None else [{"uri": self.project.as_uri(), "name": self.project.name}]
            result = {"roots": roots}
            with self._lock:
                self.log.roots_asked += 1
        else:
            with self._lock:
                self.log.pings += 1
        headers = {"content-type": "application/json", "accept": ACCEPT_BOTH, "mcp-session-id": self.session_id}
        with contextlib.suppress(httpx.HTTPError):
            self._answers.post(
                self.url, json={"jsonrpc": "2.0", "id": request["id"], "result": result}, headers=headers
            )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(STREAM_OPEN_TIMEOUT)
        assert not self._thread.is_alive(), "the GET stream's reader did not stop"
        self._http.close()
        self._answers.close()


@contextlib.contextmanager
def killed_on_exit(state: Path) -> Iterator[None]:
    """Whatever an example leaves running under ``state`` is SIGKILLed (and reported by the check)."""
    try:
        yield
    finally:
        for pid in processes_for(state):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
