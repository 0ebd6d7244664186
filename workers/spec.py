"""What to run for one worker: an argv template plus environment and timings."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TEMPLATE_TOKENS", "WorkerSpec", "default_cli_path", "playwright_argv"]

TEMPLATE_TOKENS = ("port", "output_dir", "profile_dir", "browser", "cli")
# Only our own tokens are substituted, so templates for other servers may carry literal braces
# (JSON config flags) without str.format tripping over them.
_TOKEN_RE = re.compile(r"\{(" + "|".join(TEMPLATE_TOKENS) + r")\}")


def default_cli_path() -> Path:
    """The pinned @playwright/mcp entry point installed by ``npm ci`` in ``workers/``."""
    return Path(__file__).resolve().parent / "node_modules" / "@playwright" / "mcp" / "cli.js"


def playwright_argv(
    *, headless: bool = True, viewport: str | None = None, extra_args: Sequence[str] = ()
) -> tuple[str, ...]:
    """The default template for @playwright/mcp 0.0.83.

    ``--browser chromium`` also turns Chromium's sandbox off, which it needs when run as root;
    ``--shared-browser-context`` with a ``--user-data-dir`` (and no ``--isolated``) lets a second,
    router-owned MCP session share the client's browser context (warm-up, state saving).
    """
    argv: list[str] = ["node", "{cli}", "--port", "{port}", "--host", "127.0.0.1"]
    if headless:
        argv.append("--headless")
    argv += [
        "--browser", "chromium",
        "--executable-path", "{browser}",
        "--user-data-dir", "{profile_dir}",
        "--shared-browser-context",
        "--output-dir", "{output_dir}",
        "--caps", "storage",
        "--file-paths", "absolute",
    ]  # fmt: skip
    if viewport:
        argv += ["--viewport-size", viewport]
    argv += list(extra_args)
    return tuple(argv)


@dataclass(frozen=True)
class WorkerSpec:
    argv_template: tuple[str, ...] = field(default_factory=playwright_argv)
    env: Mapping[str, str] = field(default_factory=dict)
    ready_timeout: float = 15.0
    stop_grace: float = 2.0

    def render(self, *, port: int, output_dir: Path, profile_dir: Path, browser: str, cli: str) -> list[str]:
        values = {
            "port": str(port),
            "output_dir": str(output_dir),
            "profile_dir": str(profile_dir),
            "browser": browser,
            "cli": cli,
        }
        return [_TOKEN_RE.sub(lambda m: values[m.group(1)], token) for token in self.argv_template]
