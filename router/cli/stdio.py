"""`mcp-router stdio`: the router for clients that only speak MCP over stdin/stdout.

    claude mcp add browser -- mcp-router stdio

One stdio process is one router session (one browser); it ends the session when stdin closes.
The token is read from the state dir (the same settings as `serve`), or --token / MCP_ROUTER_TOKEN.

Claude Code gives every stdio server it starts ``CLAUDE_CODE_SESSION_ID``, the same again after
``claude --resume``: the bridge sends it on ``initialize`` as the conversation's key, and the
router gives the resumed conversation the browser its last session left (cookies, storage, tabs,
the page).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import httpx

from router.api_client import base_url
from router.http.auth import WeakToken, read_token
from router.operator.logs import configure_logging
from router.settings import Settings

TOKEN_ENV: Final = "MCP_ROUTER_TOKEN"
CONVERSATION_ENV: Final = "CLAUDE_CODE_SESSION_ID"  # Claude Code's, the same after --resume
HEALTH_TIMEOUT: Final = 2.0  # one probe of /healthz
START_DEADLINE: Final = 60.0  # a router started by --start must answer /healthz by then
START_POLL: Final = 0.2
STARTED_LOG: Final = "stdio-started-serve.log"  # in the state dir: the started router's stderr
EXIT_NO_ROUTER: Final = 69  # EX_UNAVAILABLE


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("stdio", help="serve MCP on stdin/stdout, forwarding to the router (for stdio-only clients)")
    p.add_argument("--url", help="the router's MCP endpoint (default: http://127.0.0.1:<port>/mcp)")
    p.add_argument("--port", type=int, help="the router's port, when --url is not given")
    p.add_argument("--state-dir", help="where the token is read from (as for serve)")
    p.add_argument("--token", help=f"the router's token (default: ${TOKEN_ENV}, else the state dir's)")
    p.add_argument("--conversation-env", metavar="VAR", default=CONVERSATION_ENV,
                   help=f"the variable naming the client's conversation, whose browser comes back when it resumes "
                        f"(default: {CONVERSATION_ENV}, which Claude Code sets)")
    p.add_argument("--start", action="store_true",
                   help="if no router answers, start `mcp-router serve` in the background and wait for it")
    p.set_defaults(func=_stdio)


def _stdio(args: argparse.Namespace) -> int:
    import anyio

    from router.bridge.run import bridge

    configure_logging("info", "text")  # stderr: the client's log of its server
    overrides = {k: v for k in ("port", "state_dir") if (v := getattr(args, k)) is not None}
    settings = Settings(**overrides)
    url = args.url or f"{base_url(settings.host, settings.port)}/mcp"
    try:
        token = args.token or os.environ.get(TOKEN_ENV) or read_token(Path(settings.state_dir))
    except WeakToken as exc:
        return _fail(str(exc))
    if not router_answers(url):
        if not args.start:
            return _fail(not_running_message(url))
        problem = start_router(url, Path(settings.state_dir))
        if problem is not None:
            return _fail(problem)
        if token is None:  # a router's first start writes the token
            token = read_token(Path(settings.state_dir))
    anyio.run(bridge, url, token, os.environ.get(args.conversation_env) or None)
    return 0


def router_answers(url: str) -> bool:
    try:
        answer = httpx.get(_health_url(url), timeout=HEALTH_TIMEOUT, trust_env=False)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200


def not_running_message(url: str) -> str:
    port = urlsplit(url).port
    flag = f" --port {port}" if port else ""
    return (
        f"no mcp-router answers at {url}.\n"
        f"  Start one:            mcp-router serve{flag}\n"
        f"  or keep one running:  mcp-router service install{flag}\n"
        f"  or let this command start one in the background: mcp-router stdio --start"
        + (f" --url {url}" if flag else "")
    )


def start_router(url: str, state_dir: Path) -> str | None:
    """Start `mcp-router serve` detached for ``url``; None once /healthz answers, else the problem."""
    from router.cli.main import EXIT_STATE_LOCKED

    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        return f"--start needs a URL with a host and a port, not {url}"
    argv = [sys.executable, "-m", "router.cli", "serve", "--host", parts.hostname, "--port", str(parts.port),
            "--state-dir", str(state_dir)]
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_path = state_dir / STARTED_LOG
    with log_path.open("ab") as log_file:
        # Its own session: the router outlives this stdio process and its client. Never our
        # stdout: that is the MCP wire.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file,
                                start_new_session=True)
    print(f"mcp-router stdio: started `mcp-router serve` (pid {proc.pid}), log in {log_path}", file=sys.stderr)
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        if router_answers(url):
            return None
        # Locked: another router took the state dir first (a second client racing this one); wait for it.
        if proc.poll() not in (None, EXIT_STATE_LOCKED):
            return f"`mcp-router serve` exited with {proc.returncode}; see {log_path}"
        time.sleep(START_POLL)
    return f"the router started for {url} did not answer /healthz within {START_DEADLINE:.0f} s; see {log_path}"


def _health_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/healthz"


def _fail(message: str) -> int:
    print(f"mcp-router stdio: {message}", file=sys.stderr)
    return EXIT_NO_ROUTER
