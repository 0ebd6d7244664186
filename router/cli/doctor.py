"""`mcp-router doctor`: checks what the router needs on this machine, one line each, with the fix.

Each check returns a ``Check``; the command prints ``✓ ...`` or ``✗ ... — fix: ...`` and exits 1
when any failed. Warnings and hints (``!``) do not fail: the router works, but not as well as it
could, or not the way it could be set up (an uninstalled systemd unit is a choice, not a fault).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
from pydantic import ValidationError

from router.api_client import base_url
from router.cli.capacity import Capacity
from router.cli.service_unit import UNIT_NAME
from router.http.auth import WeakToken, read_token, token_path
from router.layout import StateLayout
from router.record import schema
from router.settings import Settings
from router.state_lock import lock_status
from workers.memory import host_memory
from workers.spec import default_cli_path, sandbox_possible

NODE_MIN: Final = 18
NODE_RECOMMENDED: Final = 20
BROWSER_TIMEOUT: Final = 30.0
WORKERS_DIR: Final = default_cli_path().parents[3]  # workers/node_modules/@playwright/mcp/cli.js


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str
    fix: str = ""
    warning: bool = False

    def line(self) -> str:
        if not self.ok:
            return f"✗ {self.message} — fix: {self.fix}"
        return f"{'!' if self.warning else '✓'} {self.message}" + (f" — {self.fix}" if self.fix else "")


def check_node() -> Check:
    node = shutil.which("node")
    if node is None:
        return Check(False, "node not found on PATH", f"install Node.js ≥ {NODE_RECOMMENDED} (scripts/setup), "
                     "or put its directory on PATH (the systemd unit has an Environment=PATH line)")
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(False, f"node at {node} does not run: {exc}", "reinstall Node.js")
    match = re.match(r"v(\d+)\.", out.stdout.strip())
    if out.returncode != 0 or match is None:
        return Check(False, f"node at {node} gave no version ({out.stderr.strip()[:200]})", "reinstall Node.js")
    major = int(match.group(1))
    version = out.stdout.strip()
    if major < NODE_MIN:
        return Check(False, f"node {version} is too old ({node})", f"install Node.js ≥ {NODE_RECOMMENDED}")
    if major < NODE_RECOMMENDED:
        return Check(True, f"node {version} ({node})", f"Node.js ≥ {NODE_RECOMMENDED} is recommended", warning=True)
    return Check(True, f"node {version} ({node})")


def check_worker_package(workers_dir: Path = WORKERS_DIR) -> Check:
    fix = f"run scripts/setup (npm ci in {workers_dir})"
    try:
        wanted = json.loads((workers_dir / "package.json").read_text())["dependencies"]["@playwright/mcp"]
    except (OSError, ValueError, KeyError) as exc:
        return Check(False, f"cannot read the pinned worker version: {exc}", "restore workers/package.json")
    installed_file = workers_dir / "node_modules" / "@playwright" / "mcp" / "package.json"
    try:
        installed = json.loads(installed_file.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return Check(False, f"@playwright/mcp {wanted} is not installed", fix)
    if installed != wanted:
        return Check(False, f"@playwright/mcp {installed} installed, {wanted} pinned", fix)
    return Check(True, f"@playwright/mcp {installed} installed (pinned)")


def check_browser(settings: Settings, timeout: float = BROWSER_TIMEOUT) -> Check:
    browser = settings.browser_path()
    if browser is None:
        return Check(False, "no Chromium found", "install chromium (scripts/setup) or set MCP_ROUTER_BROWSER")
    if not os.access(browser, os.X_OK):
        return Check(False, f"browser {browser} is not executable", "point MCP_ROUTER_BROWSER at a Chromium binary")
    sandbox = sandbox_possible()  # as the workers will run it: sandboxed unless root
    with tempfile.TemporaryDirectory(prefix="mcp-router-doctor-") as profile:
        argv = [browser, "--headless", *([] if sandbox else ["--no-sandbox"]), "--disable-gpu", "--no-first-run",
                f"--user-data-dir={profile}", "--dump-dom", "about:blank"]
        # Own session, so a browser that hangs is killed with all its helper processes.
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Check(False, f"browser {browser} did not finish a headless run in {timeout:g} s",
                         "run it by hand with --headless --dump-dom about:blank and read its errors")
        finally:
            _kill_group(proc)
    if proc.returncode != 0 or b"<html" not in out.lower():
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        fix = "install a working Chromium (scripts/setup) or set MCP_ROUTER_BROWSER"
        if sandbox:
            fix += ("; if only its sandbox fails (no user namespaces), allow them, "
                    "or run the workers without it: --worker-arg=--no-sandbox")
        return Check(False, f"browser {browser} does not launch headless{' sandboxed' if sandbox else ''} "
                     f"({tail[0][:200]})", fix)
    return Check(True, f"browser {browser} launches headless{' in its sandbox' if sandbox else ''}")


def check_sandbox() -> Check:
    if sandbox_possible():
        return Check(True, "Chromium's sandbox is on (the router does not run as root)")
    return Check(True, "Chromium's sandbox is off: the router runs as root, where Chromium cannot have it",
                 "run the router as an ordinary user to turn it on", warning=True)


def check_memory(capacity: Capacity) -> Check:
    """How many sessions the memory available holds, a browser each and sharing browsers, and
    how many the settings let live: a hint for sizing, never a fault."""
    per_browser, workers = capacity.per_browser, capacity.max_live_workers
    shape = ", a browser each" if per_browser <= 1 else f" × --sessions-per-browser {per_browser}"
    as_set = f"as set, at most {capacity.cap} live (--max-live-workers {workers}{shape})"
    if capacity.available is None:
        return Check(True, f"memory available cannot be read; {as_set}",
                     "only --max-live-workers limits the live browsers", warning=True)
    room = (f"memory: {capacity.available / 2**30:.1f} GiB available holds ~{capacity.a_browser_each} more "
            f"sessions with a browser each, ~{capacity.sharing} sharing {capacity.compared_per_browser} to a browser")
    if capacity.over_memory:
        return Check(True, f"{room}; {as_set}: more than fit",
                     f"--max-live-workers {capacity.workers_that_fit} stays within it (past the cap the router "
                     "hibernates the least recent idle session; past memory the OOM killer picks)", warning=True)
    return Check(True, f"{room}; {as_set}", "figures for light pages; busy ones take more (docs/operations.md)")


def check_private_state(state_dir: Path) -> Check:
    if not state_dir.exists():
        return Check(True, f"state dir {state_dir} will be created private (0700) on first start")
    mode = state_dir.stat().st_mode & 0o777
    if mode & 0o077:
        return Check(False, f"state dir {state_dir} is readable by others (mode {mode:o}): recorded calls, "
                     "cookies and profiles are in it", f"chmod 700 {state_dir} (serve does it at start)")
    return Check(True, f"state dir {state_dir} is private ({mode:o})")


def check_token(state_dir: Path, auth: str) -> Check:
    path = token_path(state_dir)
    if auth == "none":
        return Check(True, "auth is off on /mcp (--auth none): anyone on this machine can drive the browsers "
                     "(the dashboard and /api still want the token)",
                     "leave --auth at token unless every local user and process is trusted", warning=True)
    try:
        token = read_token(state_dir)
    except WeakToken as exc:
        return Check(False, str(exc), f"delete {path}; the router makes a new one (mcp-router token prints it)")
    except OSError as exc:
        return Check(False, f"token file {path} cannot be read ({exc.strerror or exc})", f"chmod 600 {path}")
    if token is None:
        return Check(True, f"no token yet at {path} (made on first start; `mcp-router token` makes it now)")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        return Check(False, f"token file {path} is readable by others (mode {mode:o})", f"chmod 600 {path}")
    return Check(True, f"token file {path} is private ({mode:o})")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def check_state_dir(state_dir: Path) -> Check:
    fix = f"make {state_dir} writable, or set MCP_ROUTER_STATE_DIR / --state-dir"
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # private, as serve makes it
        with tempfile.NamedTemporaryFile(dir=state_dir, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(False, f"state dir {state_dir} is not writable ({exc.strerror or exc})", fix)
    return Check(True, f"state dir {state_dir} is writable")


def check_database(state_dir: Path) -> Check:
    path = StateLayout(state_dir).db
    if not path.exists():
        return Check(True, f"no database yet at {path} (created on first start)")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            version = schema.user_version(conn)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return Check(False, f"database {path} does not open ({exc})", f"move {path} aside; the router starts a new one")
    if version > schema.SCHEMA_VERSION:
        return Check(False, f"database {path} has schema v{version}, newer than this router (v{schema.SCHEMA_VERSION})",
                     "upgrade mcp-router, or move the file aside")
    note = "" if version == schema.SCHEMA_VERSION else f" (migrated to v{schema.SCHEMA_VERSION} on start)"
    opens = f"database {path} opens, schema v{version}{note}"
    return Check(True, opens)


def check_port(host: str, port: int) -> Check:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return Check(True, f"port {host}:{port} is free")
        except OSError as exc:
            bind_error = exc.strerror or str(exc)
    try:
        answer = httpx.get(f"{base_url(host, port)}/healthz", timeout=2, trust_env=False)
        if answer.status_code == 200 and answer.json().get("status") == "ok":
            return Check(True, f"a router already answers on {host}:{port}")
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return Check(False, f"port {host}:{port} is not available ({bind_error})",
                 "stop what uses it, or choose another with --port / MCP_ROUTER_PORT")


def check_state_lock(state_dir: Path) -> Check:
    """Which router, if any, holds the state directory: a second one there would refuse to start."""
    try:
        status = lock_status(state_dir)
    except OSError as exc:  # a state dir that is not there or not a directory: checked above
        return Check(True, f"no router can hold {state_dir} ({exc.strerror or exc})")
    if status.held:
        return Check(True, f"a running router holds {state_dir} (pid {status.pid})",
                     "a second `serve` on this state dir refuses to start; stop this one first", warning=True)
    return Check(True, f"no router holds {state_dir}")


def unit_path() -> Path:
    from router.cli.service import unit_dir

    return unit_dir() / UNIT_NAME


def check_unit() -> Check:
    path = unit_path()
    if not path.is_file():
        # A choice, not a fault: scripts/serve runs the router without it.
        return Check(True, f"systemd user unit not installed ({path})",
                     "to run it as a service: mcp-router service install", warning=True)
    return Check(True, f"systemd user unit installed ({path})")


def run_checks(settings: Settings, *, progress: Callable[[Check], None] | None = None) -> list[Check]:
    state_dir = Path(settings.state_dir)
    steps: list[Callable[[], Check]] = [
        check_node,
        check_worker_package,
        lambda: check_browser(settings),
        check_sandbox,
        lambda: check_memory(
            Capacity(host_memory().available(), settings.sessions_per_browser, settings.max_live_workers)
        ),
        lambda: check_state_dir(state_dir),
        lambda: check_private_state(state_dir),
        lambda: check_token(state_dir, settings.auth),
        lambda: check_state_lock(state_dir),
        lambda: check_database(state_dir),
        lambda: check_port(settings.host, settings.port),
        check_unit,
    ]
    results = []
    for step in steps:
        try:
            result = step()
        except Exception as exc:  # a check that breaks is a finding, not a crash of the doctor
            result = Check(False, f"{getattr(step, '__name__', 'check')} failed: {exc!r}", "report this as a bug")
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "doctor", help="check node, the worker package, the browser and its sandbox, memory, state dir, token, "
        "database, port"
    )
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--state-dir")
    p.add_argument("--browser", help="path of the Chromium binary")
    p.add_argument("--max-live-workers", type=int, help="the memory line's cap, as `serve` takes it")
    p.add_argument("--sessions-per-browser", type=int, help="the memory line's sessions per browser, as `serve`")
    p.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    names = ("host", "port", "state_dir", "browser", "max_live_workers", "sessions_per_browser")
    overrides = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:  # a setting serve would refuse too: a finding, not a traceback
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else "settings"
            fix = f"correct MCP_ROUTER_{name.upper()} or its flag"
            print(Check(False, f"setting {name}: {error['msg']}", fix).line())
        return 1
    results = run_checks(settings, progress=lambda c: print(c.line(), flush=True))
    failed = sum(not c.ok for c in results)
    print(f"{failed} problem(s) found" if failed else "all checks passed")
    return 1 if failed else 0
