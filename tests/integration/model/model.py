"""The session lifecycle as a state machine: what the model expects of each session, the rules
that drive the real router (a process, with the stand-in worker), and the invariants checked
after every step. ``test_lifecycle_model.py`` runs it; regression tests replay shrunk sequences.

The model does not predict when the router reaps: the idle timeout is short, so sessions sleep
whenever the steps leave them alone long enough. It predicts what must hold whatever happened:
a session's browser (a ``clicks`` cookie and its page URL) is exactly what the client last saw,
unless a SIGKILL (of its worker or of the router) made the router fall back to its last save, and
even then never older than a save the model knows of and never another session's; no worker
without an owner, no slot without a worker; every answered call recorded once; every refusal a
4xx with a JSON-RPC error body; nothing hangs.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.integration.model.harness import (
    BLANK_URL,
    Answer,
    Client,
    GetStream,
    RouterProcess,
    initialize_params,
    killed_on_exit,
    ref_id,
    tool_text,
)
from tests.support.routers import spare_port
from tests.support.wait import wait_for

IDLE_TIMEOUT: Final = 1.0
MAX_RESTARTS: Final = 2  # a third crash within the window degrades the session (503)
MAX_SESSIONS_OPEN: Final = 4  # the model's clients at once: one more than the smallest cap
SETTLE: Final = 10.0  # how long the router may take to reach what the model expects
REAP_WAIT: Final = IDLE_TIMEOUT + 10.0
# A never-used session this long idle must be evicted for a new one at --max-sessions.
EVICTABLE_AFTER: Final = IDLE_TIMEOUT + 2.0
# A clean stop: uvicorn re-raises the SIGTERM it handled (systemd counts that as success).
STOPPED: Final = (0, -signal.SIGTERM)
CHECKS: Final = 2  # the invariants below, each skipped once after a start
TOOLS: Final = ("browser_click", "browser_snapshot", "browser_navigate")
_CLICKS = re.compile(r"clicks (\d+)")
_PAGE_URL = re.compile(r"- Page URL: (\S+)")


@dataclass
class Conversation:
    """One client's session as the model expects it."""

    label: str
    client: Client
    claude_code: bool  # roots declared, GET stream at once and reopened, never DELETE
    project: Path | None
    stream: GetStream | None = None
    low: int = 0  # the clicks the browser may hold: low..high
    high: int = 0
    durable: int = 0  # a save is known to hold at least this many
    urls: set[str] = field(default_factory=lambda: {BLANK_URL})  # the page URLs it may show
    navigated: bool = False
    url_durable: bool = False  # a save is known to hold its URL
    browsed: bool = False
    last_used: float = field(default_factory=time.monotonic)
    crashes: int = 0  # SIGKILLs of its live worker (each may count against the restart budget)
    degraded: bool = False
    ended: bool = False
    loaded: bool = True  # known to the running router (it loads a previous run's on first use)

    @property
    def page(self) -> str:
        return f"http://127.0.0.1:9/model/{self.label}"

    @property
    def session_id(self) -> str:
        assert self.client.session_id is not None
        return self.client.session_id

    def fell_back(self) -> None:
        """Its browser is now what the last save held: at least ``durable``."""
        self.low = min(self.low, self.durable)
        if not self.url_durable:
            self.urls = {self.page, BLANK_URL} if self.navigated else {BLANK_URL}


@dataclass
class Config:
    max_live_workers: int
    max_sessions: int
    resume_reserve: int
    sessions_per_browser: int = 1  # more: sessions share workers, each its own context

    def args(self) -> list[str]:
        shared = ["--sessions-per-browser", str(self.sessions_per_browser)] if self.sessions_per_browser > 1 else []
        return [
            "--idle-timeout", str(IDLE_TIMEOUT),
            "--max-live-workers", str(self.max_live_workers),
            "--max-sessions", str(self.max_sessions),
            "--resume-reserve", str(self.resume_reserve),
            *shared,
        ]  # fmt: skip


ROUTER_ENV: Final = {
    "MCP_ROUTER_MAX_RESTARTS": str(MAX_RESTARTS),
    "MCP_ROUTER_RESTART_BACKOFF": "[0.05]",
    "MCP_ROUTER_KEEPALIVE_INTERVAL": "0.5",
    "MCP_ROUTER_HEALTH_INTERVAL": "2",
}


class LifecycleModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="lifecycle-model-"))
        self.state = self.tmp / "state"
        self.state.mkdir()
        self.router: RouterProcess | None = None
        self.config: Config | None = None
        self.conversations: list[Conversation] = []
        self.answered: set[str] = set()  # ref ids of tool calls the clients saw answered
        self.calls_sent = 0
        self._labels = iter(range(1000))
        self.steps: list[str] = []
        # Just (re)started: the next step comes before the checks, as a client's request may
        # (during the start-up probe, the orphan sweep), and the checks after it.
        self.fresh = 0  # checks still to skip

    # -- set-up and tear-down ------------------------------------------------------------------

    @initialize(
        max_live_workers=st.sampled_from([1, 2, 8]),
        max_sessions=st.sampled_from([3, 100]),
        resume_reserve=st.sampled_from([0, 1]),
        opening=st.lists(st.booleans(), max_size=2),
        sessions_per_browser=st.sampled_from([1, 1, 2]),
    )
    def start(
        self, max_live_workers: int, max_sessions: int, resume_reserve: int, opening: list[bool] | None = None,
        sessions_per_browser: int = 1,
    ) -> None:
        """The router, and the sessions ``opening`` says (Claude Code's or not) opened at once."""
        self.config = Config(max_live_workers, max_sessions, resume_reserve, sessions_per_browser)
        self.router = RouterProcess(self.state, spare_port(), self.config.args(), ROUTER_ENV)
        self.router.start()
        self.fresh = CHECKS
        for claude_code in opening or []:
            self.open_session(claude_code)

    def teardown(self) -> None:
        try:
            for c in self.conversations:
                if c.stream is not None:
                    c.stream.close()
                c.client.close()
            if self.router is not None and self.router.proc is not None:
                code = self.router.stop()
                assert code in STOPPED, f"the router exited {code} on SIGTERM:\n{self.router.log_tail()}"
                wait_for(lambda: not self.router_pids(), timeout=SETTLE)  # type: ignore[union-attr]
        finally:
            if self.router is not None:
                self.router.close()
            with killed_on_exit(self.state):
                pass
            shutil.rmtree(self.tmp, ignore_errors=True)

    def router_pids(self) -> set[int]:
        assert self.router is not None
        return self.router.worker_pids()

    # -- helpers ---------------------------------------------------------------------------------

    def pick(self, index: int, *, claude_code: bool | None = None, open_only: bool = True) -> Conversation | None:
        found = [
            c
            for c in self.conversations
            if (claude_code is None or c.claude_code == claude_code) and not (open_only and c.ended)
        ]
        return found[index % len(found)] if found else None

    def open_sessions(self) -> bool:
        return any(not c.ended for c in self.conversations)

    def used(self, c: Conversation) -> None:
        c.last_used = time.monotonic()
        c.loaded = True

    def refused(self, answer: Answer, status: int) -> dict[str, Any]:
        assert answer.status == status, (status, answer.status, answer.text)
        return answer.error_body()

    # -- rules: sessions -------------------------------------------------------------------------

    @precondition(lambda self: sum(not c.ended for c in self.conversations) < MAX_SESSIONS_OPEN)
    @rule(claude_code=st.booleans())
    def open_session(self, claude_code: bool) -> None:
        assert self.router is not None and self.config is not None
        label = f"s{next(self._labels)}"
        client = Client(self.router.url)
        self.steps.append(f"open {label} cc={claude_code}")
        _, answer = client.request("initialize", initialize_params(claude_code, f"model-{label}"))
        known = [c for c in self.conversations if c.loaded and not c.ended]
        if answer.status == 503:
            assert len(known) >= self.config.max_sessions, f"refused below the cap: {answer.text}"
            now = time.monotonic()
            evictable = [c.label for c in known if not c.browsed and now - c.last_used > EVICTABLE_AFTER]
            assert not evictable, f"503 while {evictable} never used a browser and sat idle"
            assert answer.headers.get("retry-after"), answer.headers
            answer.error_body()
            client.close()
            return
        assert answer.status == 200, answer.text
        if len(known) >= self.config.max_sessions:
            self._find_evicted(known)
        session_id = answer.headers["mcp-session-id"]
        assert re.fullmatch(r"[\x21-\x7e]{16,}", session_id), session_id
        assert answer.only()["result"]["protocolVersion"]
        client.session_id = session_id
        project = None
        if claude_code:
            project = self.tmp / f"project-{label}"
            project.mkdir()
        conversation = Conversation(label, client, claude_code, project)
        self.conversations.append(conversation)
        assert client.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202
        if claude_code:  # its GET stream at once, before tools/list
            conversation.stream = GetStream(self.router.url, session_id, project, reopen=True).start()
            assert conversation.stream.wait_open(), conversation.stream.log
        _, tools = client.request("tools/list")
        assert tools.status == 200, tools.text
        names = {t["name"] for t in tools.only()["result"]["tools"]}
        assert {"browser_click", "browser_snapshot", "browser_navigate"} <= names, names
        self.used(conversation)

    def _find_evicted(self, known: list[Conversation]) -> None:
        """A new session at --max-sessions made room: one never-used session was ended for good."""
        assert self.router is not None
        rows = self.router.api_sessions()
        gone = [c for c in known if rows.get(c.session_id, {}).get("live") is not True]
        assert len(gone) == 1, f"made room by ending {[c.label for c in gone]}"
        assert not gone[0].browsed, f"ended {gone[0].label}, which had a browser"
        gone[0].ended = True

    def _send(self, c: Conversation, tool: str, *, seconds: float = 0.0, other_connection: bool = False) -> Answer:
        """A tool call on the session: on its own connection, or on a second one as a client
        making calls in parallel does."""
        arguments: dict[str, Any] = {}
        if tool == "browser_navigate":
            arguments = {"url": c.page}
        elif tool == "browser_click":
            arguments = {"target": "e2"}
        elif tool == "browser_wait_for":
            arguments = {"time": seconds}
        self.calls_sent += 1
        if not other_connection:
            return c.client.call(tool, **arguments)
        client = Client(c.client.url, c.client.ids)  # one session: ids never repeat on it
        client.session_id = c.session_id
        try:
            return client.call(tool, **arguments)
        finally:
            client.close()

    def _observe(self, c: Conversation, answer: Answer) -> tuple[int, str] | None:
        """Checks a call's answer on ``c`` and returns the (clicks, page URL) it shows; None when
        it was refused as the model allows (an ended session's 404, a degraded one's 503)."""
        if c.ended:
            self.refused(answer, 404)
            return None
        self.used(c)
        if answer.status == 503 and (c.degraded or c.crashes > MAX_RESTARTS):
            assert answer.headers.get("retry-after"), answer.headers
            answer.error_body()
            c.degraded = True
            return None
        assert not c.degraded, f"{c.label} was degraded, and now answered {answer.status}"
        assert answer.status == 200, (answer.status, answer.text)
        message = answer.only()
        assert "result" in message and not message["result"].get("isError"), message
        self.answered.add(ref_id(message))
        text = tool_text(message)
        c.browsed = True
        roots = re.search(r"### Roots\n(\S+)", text)
        if c.claude_code:
            assert c.project is not None
            assert roots is not None and roots.group(1) == c.project.as_uri(), f"{c.label}'s worker got roots {roots}"
        else:
            assert roots is None, text
        clicks, url = _CLICKS.search(text), _PAGE_URL.search(text)
        assert clicks is not None and url is not None, text
        return int(clicks.group(1)), url.group(1)

    def _settle(self, c: Conversation, clicks: int, url: str) -> None:
        c.low = c.high = clicks
        c.urls = {url}

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3), tool=st.sampled_from(TOOLS))
    def call(self, index: int, tool: str) -> None:
        """A state-changing call (click: one more; navigate: its own page) or a read-only one."""
        c = self.pick(index, open_only=False)
        if c is None:
            return
        self.steps.append(f"{tool} {c.label}")
        seen = self._observe(c, self._send(c, tool))
        if seen is None:
            return
        clicks, url = seen
        step = 1 if tool == "browser_click" else 0
        assert c.low + step <= clicks <= c.high + step, f"{c.label}: {clicks} clicks, not {c.low}..{c.high} +{step}"
        if tool == "browser_navigate":
            assert url == c.page, url
            c.navigated = True
        else:
            assert url in c.urls, f"{c.label} shows {url}, expected one of {c.urls}"
        self._settle(c, clicks, url)

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3), tools=st.lists(st.sampled_from(TOOLS), min_size=2, max_size=3))
    def calls_at_once(self, index: int, tools: list[str]) -> None:
        """Calls on one session at the same time, each on its own connection (a model's parallel
        tool calls), after a pause that may have let the worker go: they resume it together."""
        c = self.pick(index)
        if c is None:
            return
        self.steps.append(f"at once {tools} {c.label}")
        with ThreadPoolExecutor(len(tools)) as pool:
            answers = list(pool.map(lambda tool: self._send(c, tool, other_connection=True), tools))
        seen = [self._observe(c, answer) for answer in answers]
        if c.degraded:
            return
        clicks = tools.count("browser_click")
        by_tool = [(tool, s) for tool, s in zip(tools, seen, strict=True) if s is not None]
        for tool, (n, url) in by_tool:
            least = c.low + (1 if tool == "browser_click" else 0)
            assert least <= n <= c.high + clicks, f"{c.label}: {tool} saw {n} clicks, not {least}..{c.high}+{clicks}"
            assert url in c.urls | {c.page}, url
        clicked = [n for tool, (n, _) in by_tool if tool == "browser_click"]
        if clicked:  # each click saw its own count: one more each time
            assert len(set(clicked)) == len(clicked), f"{c.label}: two clicks saw the same count {clicked}"
            final = max(clicked)
        else:
            final = by_tool[0][1][0]
            assert all(n == final for _, (n, _) in by_tool), by_tool
        if "browser_navigate" in tools:
            c.navigated = True
        url = c.page if "browser_navigate" in tools else by_tool[0][1][1]
        self._settle(c, final, url)

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3), delay=st.sampled_from([0.0, 0.01, 0.05]))
    def delete_during_call(self, index: int, delay: float) -> None:
        """A plain client DELETEs its session while one of its calls is under way (resuming it,
        maybe): the call is answered or refused 404, and nothing of the session is left."""
        c = self.pick(index, claude_code=False)
        if c is None:
            return
        self.steps.append(f"DELETE {c.label} during a call")
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(self._send, c, "browser_click", other_connection=True)
            time.sleep(delay)  # not a wait for anything: where in the call the DELETE lands
            deleted = c.client.delete()
            answer = pending.result()
        assert deleted.status in (200, 204), (deleted.status, deleted.text)
        if answer.status == 200:
            message = answer.only()
            if "result" in message and not message["result"].get("isError"):
                self.answered.add(ref_id(message))
        elif answer.status == 503 and (c.degraded or c.crashes > MAX_RESTARTS):
            answer.error_body()  # refused as degraded before the DELETE landed
        else:
            self.refused(answer, 404)
        self._ended(c)

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3))
    def take_over_during_call(self, index: int) -> None:
        """Claude Code's stream taken over while its call runs (the worker may be asking roots)."""
        c = self.pick(index, claude_code=True)
        if c is None or c.stream is None:
            return
        self.steps.append(f"GET {c.label} during a call")
        stream = c.stream
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(self._send, c, "browser_snapshot", other_connection=True)
            done = stream.take_over()
            wait_for(lambda: stream.log.taken_over >= done, timeout=SETTLE)
            answer = pending.result()
        seen = self._observe(c, answer)
        if seen is not None:
            assert c.low <= seen[0] <= c.high and seen[1] in c.urls, (seen, c.low, c.high, c.urls)
            self._settle(c, *seen)

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3))
    def slow_call_past_idle(self, index: int) -> None:
        """A call that runs longer than the idle timeout: its worker must not be reaped under it."""
        c = self.pick(index)
        if c is None:
            return
        self.steps.append(f"slow call {c.label}")
        seen = self._observe(c, self._send(c, "browser_wait_for", seconds=IDLE_TIMEOUT * 1.2))
        if seen is not None:
            assert c.low <= seen[0] <= c.high and seen[1] in c.urls, (seen, c.low, c.high, c.urls)
            self._settle(c, *seen)

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3))
    def kill_worker_during_call(self, index: int) -> None:
        """The worker SIGKILLed under a call: the call is answered with a JSON-RPC error (or, sent
        again to a resumed worker, with its result); the session carries on."""
        assert self.router is not None
        router = self.router
        c = self.pick(index)
        if c is None or c.degraded:
            return
        self.steps.append(f"kill worker of {c.label} during a call")
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(self._send, c, "browser_wait_for", seconds=1.0, other_connection=True)

            def running() -> int | None:
                row = router.api_sessions().get(c.session_id, {})
                return row.get("worker_pid") if row.get("in_flight") else None

            wait_for(lambda: pending.done() or running(), timeout=SETTLE)
            pid = running()
            if pid is None:  # answered before it could be killed
                answer = pending.result()
                self._observe(c, answer)
                return
            self._kill(pid)
            answer = pending.result()
        self.used(c)
        if answer.status == 200:
            self._observe(c, answer)  # sent again after the resume: any clicks since the last save
        elif answer.status == 503 and c.crashes > MAX_RESTARTS:
            answer.error_body()
            c.degraded = True
        else:
            assert answer.status == 502, (answer.status, answer.text)
            answer.error_body()

    def _ended(self, c: Conversation) -> None:
        c.ended = True
        if c.stream is not None:
            stream = c.stream
            wait_for(lambda: stream.log.ended >= stream.log.opened, timeout=SETTLE)

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3))
    def take_over_stream(self, index: int) -> None:
        """A new GET stream on the session: the first for a plain client, else one that takes over."""
        assert self.router is not None
        c = self.pick(index, open_only=False)
        if c is None:
            return
        self.steps.append(f"GET {c.label}")
        if c.stream is None or c.ended:
            stream = GetStream(self.router.url, c.session_id, c.project, reopen=False).start()
            if c.ended:
                assert not stream.wait_open() and stream.log.refused == [404], stream.log
                stream.close()
                return
            assert stream.wait_open(), stream.log
            c.stream = stream
        else:
            stream = c.stream
            done = stream.take_over()
            wait_for(lambda: stream.log.taken_over >= done, timeout=SETTLE)
        self.used(c)

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3))
    def delete(self, index: int) -> None:
        """DELETE, by a plain client (Claude Code never sends one)."""
        c = self.pick(index, claude_code=False, open_only=False)
        if c is None:
            return
        self.steps.append(f"DELETE {c.label}")
        answer = c.client.delete()
        if c.ended:
            self.refused(answer, 404)
            return
        assert answer.status in (200, 204), (answer.status, answer.text)
        self._ended(c)

    @rule(kind=st.sampled_from(["unknown", "forged", "missing", "malformed", "not-json-rpc"]), index=st.integers(0, 3))
    def bad_request(self, kind: str, index: int) -> None:
        assert self.router is not None
        self.steps.append(f"bad {kind}")
        c = self.pick(index)
        client = Client(self.router.url)
        try:
            ping = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "browser_click", "arguments": {}},
            }
            if kind == "unknown":  # the shape of a minted id, never minted
                self.refused(client.post(ping, session_id=secrets.token_urlsafe(32)), 404)
            elif kind == "forged":  # not visible ASCII, too long, or a path: never a file of ours
                for forged in ("x" * 300, "a b", "id\x7f"):
                    self.refused(client.post(ping, session_id=forged), 400)
                for path in ("../../etc/passwd", "..", ".", "sessions/../token"):
                    answer = client.post(ping, session_id=path)
                    self.refused(answer, answer.status if answer.status in (400, 404) else 404)
            elif kind == "missing":
                self.refused(client.post(ping), 400)
            elif kind == "malformed" and c is not None:
                answer = client.post(None, session_id=c.session_id, raw=b'{"jsonrpc": "2.0", "id": 1, "method"')
                self.refused(answer, 404 if c.ended else 400)
            elif kind == "not-json-rpc" and c is not None:
                answer = client.post(None, session_id=c.session_id, raw=b'["not", "a", "message"]')
                self.refused(answer, 404 if c.ended else 400)
        finally:
            client.close()

    # -- rules: time and failures ------------------------------------------------------------------

    @precondition(lambda self: self.open_sessions())
    @rule(seconds=st.sampled_from([0.6]))
    def pause(self, seconds: float) -> None:
        """The model thinks, for less than the idle timeout: debounced saves run meanwhile."""
        self.steps.append(f"pause {seconds}")
        time.sleep(seconds)  # the time passing is the step, not a wait for something

    @precondition(lambda self: self.open_sessions())
    @rule()
    def pass_idle_time(self) -> None:
        """Past the idle timeout: every session's worker is reaped (its browser saved first)."""
        assert self.router is not None
        self.steps.append("idle")
        router = self.router

        def all_asleep() -> bool:
            rows = router.api_sessions()
            return not any(row.get("worker_pid") for row in rows.values())

        wait_for(all_asleep, timeout=REAP_WAIT)
        for c in self.conversations:
            if c.loaded and c.browsed and not c.ended and not c.degraded:
                c.durable, c.url_durable = c.low, c.navigated and c.low == c.high

    @precondition(lambda self: self.open_sessions())
    @rule(index=st.integers(0, 3))
    def kill_worker(self, index: int) -> None:
        """SIGKILL of a session's worker (its whole process group)."""
        assert self.router is not None
        c = self.pick(index)
        if c is None:
            return
        pid = self.router.api_sessions().get(c.session_id, {}).get("worker_pid")
        if not pid:
            return
        self.steps.append(f"kill worker {c.label}")
        self._kill(pid)

    def _kill(self, pid: int) -> None:
        """SIGKILL of a worker's process group: every session it carries crashes (one, or all of
        a shared worker's)."""
        assert self.router is not None
        rows = self.router.api_sessions()
        hit = [c for c in self.conversations if not c.ended and rows.get(c.session_id, {}).get("worker_pid") == pid]
        for c in hit:
            self._note_saved(c)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        for c in hit:
            c.crashes += 1
            c.fell_back()

    @precondition(lambda self: self.open_sessions())
    @rule(kill=st.booleans())
    def restart_router(self, kill: bool) -> None:
        """The router stopped and started again on the same state dir and port: SIGKILLed (no
        save, its workers left to the next start's sweep) or SIGTERMed as systemd stops it
        (every live session saved)."""
        assert self.router is not None
        self.steps.append("kill router" if kill else "restart router")
        if kill:
            for c in self.conversations:
                self._note_saved(c)
            self.router.kill()
        else:
            code = self.router.stop()
            assert code in STOPPED, f"exit {code}:\n{self.router.log_tail()}"
        for c in self.conversations:
            if kill:
                c.fell_back()
            elif c.browsed and not c.degraded:
                c.durable, c.url_durable = c.low, c.navigated and c.low == c.high
            self._router_restarted(c)
        self.router.start()
        # Claude Code's GET streams reopen a second later and load their sessions: until then
        # the router does not hold them, and a new session at --max-sessions needs no room.
        router = self.router
        loading = [c.session_id for c in self.conversations if c.loaded]
        wait_for(lambda: all(router.api_sessions().get(s, {}).get("live") is True for s in loading), timeout=SETTLE)
        self.fresh = CHECKS

    def _note_saved(self, c: Conversation) -> None:
        """What the session's save holds now is the least it can come back with."""
        assert self.router is not None
        saved = self.router.saved_clicks(c.session_id)
        if saved is not None and saved >= c.durable and c.low <= saved <= c.high:
            c.durable = saved

    def _router_restarted(self, c: Conversation) -> None:
        # A previous run's session is loaded on its first request: Claude Code's GET stream,
        # reopened a second later, is one.
        c.loaded = c.claude_code and not c.ended
        # Restart budgets live in the router's memory: a new run gives a degraded session a new
        # one (restarting the router is how an operator tells it to try again).
        c.degraded, c.crashes = False, 0
        if c.stream is not None and not c.stream.reopen:
            c.stream.close()  # a plain client's stream ended with the router
            c.stream = None

    # -- invariants --------------------------------------------------------------------------------

    def _skipped(self) -> bool:
        if self.fresh:
            self.fresh -= 1
            return True
        return False

    @invariant()
    def router_agrees(self) -> None:
        if self.router is None or self.config is None or self._skipped():
            return
        router, config = self.router, self.config

        def workers_owned() -> tuple[bool, str]:
            health = router.health()
            rows = router.api_sessions()
            live = {row["worker_pid"] for row in rows.values() if row.get("worker_pid")}
            pids = router.worker_pids()
            expected_sessions = sum(c.loaded and not c.ended for c in self.conversations)
            streams = {
                c.label: (c.stream.log.opened - c.stream.log.ended, c.stream.log.refused)
                for c in self.conversations
                if c.stream is not None
            }
            facts = (
                f"health={health} live={live} pids={pids} expected_sessions={expected_sessions}"
                f" states={ {r['id'][:6]: r['state'] for r in rows.values()} } streams={streams}"
            )
            ok = (
                health["status"] == "ok"
                and live <= pids
                and len(pids) == len(live) + health["warm_workers"] + router.idle_hosts()
                and health["workers"] == len(pids)
                and health.get("slots", len(pids)) == len(pids)
                and len(pids) <= config.max_live_workers
                and health["sessions"] == expected_sessions
                # Claude Code's stream is open again after whatever happened, and none stalled
                and all(
                    (c.stream.log.opened - c.stream.log.ended == 1 or not c.claude_code or c.ended)
                    and 0 not in c.stream.log.refused
                    for c in self.conversations
                    if c.stream is not None
                )
            )
            return ok, facts

        last: list[str] = []

        def settled() -> bool:
            ok, facts = workers_owned()
            last[:] = [facts]
            return ok

        try:
            wait_for(settled, timeout=SETTLE)
        except AssertionError:
            raise AssertionError(f"the router disagrees with the model: {last[0]}\nsteps: {self.steps}") from None

    @invariant()
    def every_answer_recorded_once(self) -> None:
        if self.router is None or self._skipped():
            return
        router = self.router
        missing: list[str] = []

        def recorded() -> bool:
            rows = router.recorded_calls()
            missing[:] = [ref for ref in self.answered if rows.get(ref) != (1, 1)]
            return not missing and len(rows) <= self.calls_sent

        try:
            wait_for(recorded, timeout=SETTLE)
        except AssertionError:
            rows = router.recorded_calls()
            raise AssertionError(
                f"answered but not recorded once: {missing}; {len(rows)} calls recorded for {self.calls_sent} sent"
            ) from None
