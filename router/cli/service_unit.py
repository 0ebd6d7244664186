"""The systemd user unit of mcp-router, rendered with a checkout's real paths and chosen options.

One template, here: `mcp-router service install` writes it to ~/.config/systemd/user/.
Options become MCP_ROUTER_* variables (the router's settings read them like flags).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

UNIT_NAME: Final = "mcp-router.service"

TEMPLATE: Final = """\
# systemd USER unit for mcp-router, written by `mcp-router service install` (run it again to
# change options; `mcp-router service uninstall` removes it).
#   systemctl --user status mcp-router
#   journalctl --user -u mcp-router -f
#   loginctl enable-linger $USER        # keep running while logged out
# Clients need the token: `mcp-router token --connect` prints the `claude mcp add` line.

[Unit]
Description=mcp-router: one MCP endpoint, a Playwright MCP browser per conversation
Documentation=file://{readme}
After=network.target

[Service]
Type=simple
WorkingDirectory={workdir}
ExecStart={exec_start}
{environment}\
Restart=on-failure
RestartSec=2
# On stop, signal the router, then kill everything left in the unit's cgroup (workers, Chromium).
KillMode=control-group
# State dir 0700, files 0600 (the router also sets this umask itself).
UMask=0077
TimeoutStopSec=15

[Install]
WantedBy=default.target
"""


@dataclass(frozen=True)
class UnitSpec:
    """What differs between installs: where the checkout is, how to start it, its options."""

    checkout: Path
    command: list[str]  # e.g. [<checkout>/.venv/bin/mcp-router, "serve"]
    environment: dict[str, str]


def render(spec: UnitSpec) -> str:
    # User services do not read the shell profile: the PATH that found node here goes along.
    environment = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), **spec.environment}
    lines = "".join(f"Environment={_quote(f'{key}={value}')}\n" for key, value in environment.items())
    return TEMPLATE.format(
        readme=_escape(str(spec.checkout / "README.md")),
        workdir=_quote(str(spec.checkout)),
        exec_start=" ".join(_quote(part, exec_line=True) for part in spec.command),
        environment=lines,
    )


def environment_for(options: dict[str, Any]) -> dict[str, str]:
    """Settings (as `serve`'s parsed flags) as the MCP_ROUTER_* variables the router reads."""
    env: dict[str, str] = {}
    for key, value in options.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list | dict):
            text = json.dumps(value)  # pydantic-settings reads complex values as JSON
        else:
            text = str(value)
        env[f"MCP_ROUTER_{key.upper()}"] = text
    return env


def _escape(text: str) -> str:
    return text.replace("%", "%%")  # systemd expands %-specifiers everywhere


def _quote(text: str, *, exec_line: bool = False) -> str:
    """One word for systemd: double-quoted with C escapes when it has to be."""
    text = _escape(text)
    if exec_line:
        text = text.replace("$", "$$")  # Exec lines expand $VARIABLES
    if text and not any(c in text for c in ' \t"\'\\;'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
