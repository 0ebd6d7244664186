"""Settings live at the edge: the CLI and the app factory read them; inner classes take arguments."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from workers.memory import Memory, host_memory

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
# Chromium's headless shell (Debian's chromium-headless-shell; what Playwright itself runs for
# headless): half the CPU of a full Chromium's launch (0.85 against 1.6 CPU-s per worker brought
# up) and a cold bring-up 0.7 s against 1.1 s. Debian's /usr/bin/chromium-headless-shell is a
# shell script that does not exec: the binary itself, so no sh stays between Playwright and it.
HEADLESS_SHELLS = (Path("/usr/lib/chromium/chromium-headless-shell"),)
HEADLESS_SHELL_NAMES = ("chromium-headless-shell",)
WORKER_MEMORY_BYTES = 600 * 1024 * 1024
DEFAULT_LIVE_WORKERS = 8  # when the machine's RAM cannot be read


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mcp-router"


def find_browser(*, headless: bool = True) -> str | None:
    """The same search order as scripts/setup, so the router finds what set-up installed: for
    headless workers a headless shell first, else a full Chromium or Chrome."""
    if headless:
        for shell in HEADLESS_SHELLS:
            if os.access(shell, os.X_OK):
                return str(shell)
        for name in HEADLESS_SHELL_NAMES:
            found = shutil.which(name)
            if found:
                return found
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return str(DEBIAN_CHROMIUM) if DEBIAN_CHROMIUM.exists() else None


def default_max_live_workers(memory: Memory | None = None) -> int:
    """One worker per ~600 MiB of RAM: a worker with one page open takes ~520 MiB (PSS). RAM is
    the container's or the unit's limit where that is lower than the machine's."""
    total = (memory or host_memory()).total()
    if total is None:
        return DEFAULT_LIVE_WORKERS
    return max(1, total // WORKER_MEMORY_BYTES)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MCP_ROUTER_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 4000
    state_dir: Path = Field(default_factory=default_state_dir)
    idle_timeout: float = 60.0
    # Known session ids (live or dormant); workers are capped separately by max_live_workers.
    max_sessions: int = 1000
    max_live_workers: int = Field(default_factory=default_max_live_workers)
    # Workers spawned ahead of demand, browser launched (router/pool.py); 0 keeps spawning lazy.
    warm_workers: int = Field(default=0, ge=0)
    # Warm workers kept ready while browsed sessions sleep (one per session asleep, up to this
    # many, each only while memory is spare), so a conversation's next call after a pause takes
    # a browser that is already up (router/sessions/manager.py); 0 turns it off, and then nothing
    # but the router runs once every session sleeps. Memory for latency: each waits with ~0.35
    # GiB (headless shell), kept for sessions that may never come back (Claude Code never sends
    # DELETE). One by default: the common case is one conversation coming back; a server with
    # many that come back at once raises it (scripts/bench --only resumes measures ten).
    resume_reserve: int = Field(default=1, ge=0)
    # Client sessions one worker carries, each its own MCP session and so its own browser context
    # of the worker's one browser (@playwright/mcp --isolated; router/sessions/hosts.py). 1: a
    # worker (and a browser) per session, as strong an isolation as processes give; more: several
    # times less memory per session (docs/operations.md says when to choose which).
    sessions_per_browser: int = Field(default=1, ge=1, le=200)
    # Seconds between the snapshots that keep a waiting warm worker's node and browser warm
    # (router/sessions/pool.py): a first call after 5 min of waiting cost 1.3-1.6x a steady one.
    # 0 turns them off (a call every 20 min still keeps the browser open).
    keep_warm_interval: float = Field(default=30.0, ge=0)
    # Workers coming up (spawn, browser launch, restore) at once; the rest queue. None: one per core.
    bring_ups: int | None = Field(default=None, ge=1)
    session_retention_hours: float = 24.0  # a dormant session stays resumable this long
    health_interval: float = 30.0
    max_restarts: int = 3  # per session, within restart_window seconds
    restart_window: float = 300.0
    restart_backoff: list[float] = Field(default_factory=lambda: [1.0, 2.0, 4.0])
    max_body_bytes: int = 4 * 1024 * 1024
    browser: str | None = None
    headless: bool = True
    viewport: str | None = None
    worker_args: list[str] = Field(default_factory=list)
    worker_command: list[str] | None = None
    # Worker tools hidden from tools/list and refused (router/http/tool_policy.py).
    allow_tools: list[str] = Field(default_factory=list)
    deny_tools: list[str] = Field(default_factory=list)
    ready_timeout: float = 15.0
    stop_grace: float = 2.0
    allowed_origins: list[str] = Field(default_factory=list)
    allowed_hosts: list[str] = Field(default_factory=list)
    # "token": every route but /healthz asks for <state_dir>/token; "none" only on a loopback bind.
    auth: Literal["token", "none"] = "token"
    # The workers' browsers' own origin lists (Playwright MCP's allowed/blocked origins): a
    # convenience against wandering off, not a security boundary (redirects are not checked).
    browse_allow: list[str] = Field(default_factory=list)
    browse_block: list[str] = Field(default_factory=list)
    keepalive_interval: float = 15.0
    record: bool = True
    responses: Literal["full", "compact"] = "full"
    retention_days: float = 30.0
    log_level: str = "info"
    log_format: Literal["text", "json"] = "text"
    # Scale-out (router/sessions/nodes.py): minted ids start "<node_id>." so a balancer routes by
    # the Mcp-Session-Id prefix; another node's id is answered 421. None: ids as on one host.
    node_id: str | None = None
    # Every node's base URL (this one's too): the dashboard lists the whole cluster's sessions.
    cluster_nodes: list[str] = Field(default_factory=list)

    @field_validator("node_id")
    @classmethod
    def _node_id(cls, value: str | None) -> str | None:
        from router.sessions.nodes import check_node_id

        return check_node_id(value) if value else None

    def browser_path(self) -> str | None:
        return self.browser or find_browser(headless=self.headless)
