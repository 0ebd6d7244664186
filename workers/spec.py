"""What to run for one worker: an argv template plus environment and timings."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from .node import node_executable

__all__ = [
    "ALLOWED_HOSTS_ENV",
    "ALLOWED_ORIGINS_ENV",
    "BLOCKED_ORIGINS_ENV",
    "CAPS_FLAG",
    "NODE_HEADER_SIZE_FLAG",
    "ROUTER_CAPS",
    "TEMPLATE_TOKENS",
    "WorkerSpec",
    "browse_env",
    "default_cli_path",
    "new_host_name",
    "playwright_argv",
    "sandbox_possible",
    "split_caps",
]

# The router's own: saving and restoring storage across workers, and the route that puts
# localStorage back in a resumed tab (router/sessions/storage_restore.py).
ROUTER_CAPS: Final = ("storage", "network")
CAPS_FLAG: Final = "--caps"

# @playwright/mcp 0.0.83 reads these as well as its flags. The environment, unlike argv, is
# readable by the worker's own user only: the place for the worker's secret host name.
ALLOWED_HOSTS_ENV: Final = "PLAYWRIGHT_MCP_ALLOWED_HOSTS"  # comma-separated
ALLOWED_ORIGINS_ENV: Final = "PLAYWRIGHT_MCP_ALLOWED_ORIGINS"  # semicolon-separated
BLOCKED_ORIGINS_ENV: Final = "PLAYWRIGHT_MCP_BLOCKED_ORIGINS"  # semicolon-separated, checked first
ORIGIN_SEPARATOR: Final = ";"
NODE_HEADER_SIZE_FLAG: Final = "--max-http-header-size"  # node's own limit is 16 KiB
HOST_NAME_BYTES: Final = 16

TEMPLATE_TOKENS = ("port", "output_dir", "profile_dir", "browser", "cli")
# Only our own tokens are substituted, so templates for other servers may carry literal braces
# (JSON config flags) without str.format tripping over them.
_TOKEN_RE = re.compile(r"\{(" + "|".join(TEMPLATE_TOKENS) + r")\}")


def default_cli_path() -> Path:
    """The pinned @playwright/mcp entry point installed by ``npm ci`` in ``workers/``."""
    return Path(__file__).resolve().parent / "node_modules" / "@playwright" / "mcp" / "cli.js"


def sandbox_possible() -> bool:
    """Chromium refuses its sandbox to root; everyone else gets it."""
    return os.geteuid() != 0


def new_host_name() -> str:
    """A worker's secret host name: the only ``Host`` it answers (a DNS label, so it is valid)."""
    return "w-" + secrets.token_hex(HOST_NAME_BYTES)


def browse_env(*, allow: Iterable[str] = (), block: Iterable[str] = ()) -> dict[str, str]:
    """Playwright MCP's own origin lists for the browser (not a security boundary)."""
    env = {}
    allowed, blocked = [o.strip() for o in allow if o.strip()], [o.strip() for o in block if o.strip()]
    if allowed:
        env[ALLOWED_ORIGINS_ENV] = ORIGIN_SEPARATOR.join(allowed)
    if blocked:
        env[BLOCKED_ORIGINS_ENV] = ORIGIN_SEPARATOR.join(blocked)
    return env


def playwright_argv(
    *,
    headless: bool = True,
    viewport: str | None = None,
    extra_args: Sequence[str] = (),
    sandbox: bool = False,
    node: str | None = None,
    max_header_bytes: int | None = None,
    isolated: bool = False,
) -> tuple[str, ...]:
    """The default template for @playwright/mcp 0.0.83.

    ``--browser chromium`` turns Chromium's sandbox off unless ``--sandbox`` turns it back on;
    it cannot run as root (``sandbox_possible()``). The worker keeps only its last ``--caps``, so
    the user's in ``extra_args`` join the router's. ``--shared-browser-context`` with a
    ``--user-data-dir`` (and no ``--isolated``) lets a second, router-owned MCP session share the
    client's browser context (warm-up, state saving). ``extra_args`` come last, so
    ``--no-sandbox`` there wins. ``node``: the pinned Node 22 when installed (workers/node.py).
    ``max_header_bytes``: the largest request head the worker must take, when that is more than
    node's own limit (a proxy in front that accepts more: a head node refuses gets ``431`` and a
    hang-up, and a GET stream refused so is retried for ever).
    ``isolated``: one browser for the worker and a fresh in-memory context per MCP session
    (``--isolated``), instead of the profile every session shares; ``{profile_dir}`` goes unused.
    """
    user_caps, rest = split_caps(extra_args)
    caps = [*ROUTER_CAPS, *(c for c in user_caps if c not in ROUTER_CAPS)]
    argv: list[str] = [node or node_executable()]
    if max_header_bytes is not None:
        argv.append(f"{NODE_HEADER_SIZE_FLAG}={max_header_bytes}")
    argv += ["{cli}", "--port", "{port}", "--host", "127.0.0.1"]
    if headless:
        argv.append("--headless")
    argv += ["--browser", "chromium", "--executable-path", "{browser}"]
    argv += ["--isolated"] if isolated else ["--user-data-dir", "{profile_dir}", "--shared-browser-context"]
    argv += [
        "--output-dir", "{output_dir}",
        CAPS_FLAG, ",".join(caps),
        "--file-paths", "absolute",
    ]  # fmt: skip
    if sandbox:
        argv.append("--sandbox")
    if viewport:
        argv += ["--viewport-size", viewport]
    argv += rest
    return tuple(argv)


def split_caps(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the capabilities ``--caps a,b`` or ``--caps=a,b`` in ``args`` name, in order, each once;
    the other args)."""
    caps, rest = list[str](), list[str]()
    items = iter(args)
    for arg in items:
        if arg == CAPS_FLAG:
            value = next(items, "")
        elif arg.startswith(CAPS_FLAG + "="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
            continue
        for cap in (c.strip() for c in value.split(",")):
            if cap and cap not in caps:
                caps.append(cap)
    return caps, rest


@dataclass(frozen=True)
class WorkerSpec:
    argv_template: tuple[str, ...] = field(default_factory=playwright_argv)
    env: Mapping[str, str] = field(default_factory=dict)
    ready_timeout: float = 15.0
    stop_grace: float = 2.0
    # The variable through which each worker learns the one Host it may answer (a fresh secret
    # per worker, Worker.host_header). None: a worker that checks nothing of ours (any MCP
    # server) gets "Host: localhost:<port>", which local servers accept.
    allowed_hosts_env: str | None = None

    def render(self, *, port: int, output_dir: Path, profile_dir: Path, browser: str, cli: str) -> list[str]:
        values = {
            "port": str(port),
            "output_dir": str(output_dir),
            "profile_dir": str(profile_dir),
            "browser": browser,
            "cli": cli,
        }
        return [_TOKEN_RE.sub(lambda m: values[m.group(1)], token) for token in self.argv_template]
