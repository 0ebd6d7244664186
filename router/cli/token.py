"""`mcp-router token`: the token clients must show, and how to connect with it.

It takes the flags of `serve`, so `mcp-router token --connect "$@"` before `mcp-router serve "$@"`
(scripts/serve) names the same state dir, host and port.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from router.api_client import base_url
from router.http.auth import WeakToken, load_or_create_token, private_state_dir
from router.settings import Settings

CLIENT_NAME = "browser"  # the name the `claude mcp add` line registers the router under


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from router.cli.main import add_serve_arguments

    p = sub.add_parser("token", help="print the token clients must show (created on first use)")
    add_serve_arguments(p)
    p.add_argument("--connect", action="store_true",
                   help="print the `claude mcp add` line and the dashboard link instead")
    p.set_defaults(func=_token)


def claude_line(settings: Settings, token: str | None) -> str:
    """The exact command that registers this router with Claude Code."""
    url = f"{base_url(settings.host, settings.port)}/mcp"
    parts = ["claude", "mcp", "add", "--transport", "http", CLIENT_NAME, url]
    line = " ".join(shlex.quote(p) for p in parts)
    if token is not None:
        line += f' --header "Authorization: Bearer {token}"'  # url-safe base64: nothing to quote
    return line


def dashboard_link(settings: Settings, token: str | None) -> str:
    base = base_url(settings.host, settings.port)
    # The fragment never leaves the browser: the login page trades it for a cookie.
    return f"{base}/ui/login#token={token}" if token is not None else f"{base}/ui/"


def _token(args: argparse.Namespace) -> int:
    from router.cli.main import PRIVATE_UMASK, settings_from_args

    settings = settings_from_args(args)
    os.umask(PRIVATE_UMASK)
    try:
        token = load_or_create_token(private_state_dir(settings.state_dir))
    except (OSError, WeakToken) as exc:
        print(f"mcp-router: no token: {exc}", file=sys.stderr)
        return 1
    if not args.connect:
        print(token)
        return 0
    # --auth none: /mcp wants no token, the dashboard still does (router/http/auth.py).
    print("Register it with Claude Code:")
    print(f"  {claude_line(settings, token if settings.auth == 'token' else None)}")
    print("Dashboard (signs this browser in once):")
    print(f"  {dashboard_link(settings, token)}")
    return 0
