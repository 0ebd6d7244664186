"""`mcp-router service install|status|uninstall`: the router as a systemd user service, no editing.

install renders the unit (router/cli/service_unit.py) with this checkout's paths and the flags given
(the flags of `serve`), writes it to ~/.config/systemd/user/, and starts it when a user manager is
reachable; otherwise it prints the commands that do. Then it prints how to connect a client.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

from router.cli.service_unit import UNIT_NAME, UnitSpec, environment_for, render
from router.settings import Settings

SYSTEMCTL_TIMEOUT: Final = 30.0
UNIT_STEM: Final = UNIT_NAME.removesuffix(".service")
# Parsed names that belong to this command, not to `serve`.
OWN_OPTIONS: Final = frozenset({"command", "func", "connect", "service_action"})
WANTED_BY: Final = "default.target.wants"  # the unit's [Install] target, where `enable` links it
CHECKOUT: Final = Path(__file__).resolve().parents[2]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from router.cli.main import add_serve_arguments

    p = sub.add_parser("service", help="install, inspect or remove the systemd user service")
    actions = p.add_subparsers(dest="service_action", required=True)
    install = actions.add_parser("install", help="write the user unit (flags of `serve` become its options), start it")
    add_serve_arguments(install)
    install.set_defaults(func=_install)
    actions.add_parser("status", help="the unit file and what systemd says of it").set_defaults(func=_status)
    actions.add_parser("uninstall", help="stop, disable and remove the unit").set_defaults(func=_uninstall)


def unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def serve_options(args: argparse.Namespace) -> dict[str, Any]:
    """The flags of `serve` that were given, as settings values."""
    options = {k: v for k, v in vars(args).items() if k not in OWN_OPTIONS and v is not None}
    if isinstance(options.get("worker_command"), str):
        options["worker_command"] = shlex.split(options["worker_command"])
    if "state_dir" in options:
        options["state_dir"] = str(Path(options["state_dir"]).expanduser().resolve())
    return options


def mcp_router_command() -> list[str]:
    """This installation's `mcp-router`, by absolute path: services and clients have their own PATH."""
    entry = Path(sys.executable).parent / "mcp-router"
    return [str(entry)] if entry.exists() else [sys.executable, "-m", "router.cli"]


def unit_spec(options: dict[str, Any]) -> UnitSpec:
    return UnitSpec(checkout=CHECKOUT, command=[*mcp_router_command(), "serve"], environment=environment_for(options))


def user_manager_reachable() -> bool:
    if shutil.which("systemctl") is None:
        return False
    try:
        done = subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True,
                              timeout=SYSTEMCTL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _run_or_print(commands: list[list[str]]) -> int:
    if not user_manager_reachable():
        print("No systemd user manager is reachable from here; run these where one is (your login session):")
        for argv in commands:
            print(f"  {shlex.join(argv)}")
        return 0
    for argv in commands:
        print(f"$ {shlex.join(argv)}")
        done = subprocess.run(argv, timeout=SYSTEMCTL_TIMEOUT, check=False)
        if done.returncode != 0:
            print(f"mcp-router service: `{shlex.join(argv)}` failed ({done.returncode})", file=sys.stderr)
            return done.returncode
    return 0


def _install(args: argparse.Namespace) -> int:
    from router.cli.main import settings_from_args

    options = serve_options(args)
    settings = settings_from_args(argparse.Namespace(**options))
    path = unit_dir() / UNIT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(unit_spec(options)))
    print(f"Wrote {path}")
    status = _run_or_print([
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", UNIT_STEM],
    ])
    print("Keep it running while you are logged out:  loginctl enable-linger $USER")
    _print_connect(settings, options)
    return status


def _print_connect(settings: Settings, options: dict[str, Any]) -> None:
    from router.cli.token import CLIENT_NAME, claude_line
    from router.http.auth import WeakToken, load_or_create_token, private_state_dir

    try:
        token = load_or_create_token(private_state_dir(settings.state_dir)) if settings.auth == "token" else None
    except (OSError, WeakToken) as exc:
        print(f"mcp-router service: no token: {exc}", file=sys.stderr)
        return
    print("Register it with Claude Code (over HTTP):")
    print(f"  {claude_line(settings, token)}")
    stdio = ["claude", "mcp", "add", CLIENT_NAME, "--", *mcp_router_command(), "stdio"]
    for flag, key in (("--port", "port"), ("--state-dir", "state_dir")):
        if key in options:
            stdio += [flag, str(options[key])]
    print("or through the stdio bridge (for clients that only run commands):")
    print(f"  {shlex.join(stdio)}")


def _status(args: argparse.Namespace) -> int:
    path = unit_dir() / UNIT_NAME
    print(f"{path}: {'installed' if path.exists() else 'not installed'}")
    if not user_manager_reachable():
        print("No systemd user manager is reachable from here: systemctl --user status mcp-router")
        return 0 if path.exists() else 1
    done = subprocess.run(["systemctl", "--user", "status", "--no-pager", UNIT_STEM],
                          timeout=SYSTEMCTL_TIMEOUT, check=False)
    return done.returncode


def _uninstall(args: argparse.Namespace) -> int:
    path = unit_dir() / UNIT_NAME
    reachable = user_manager_reachable()
    if reachable and path.exists():
        subprocess.run(["systemctl", "--user", "disable", "--now", UNIT_STEM], timeout=SYSTEMCTL_TIMEOUT, check=False)
    if path.exists():
        path.unlink()
        print(f"Removed {path}")
    else:
        print(f"{path}: not installed")
    if reachable:
        return _run_or_print([["systemctl", "--user", "daemon-reload"]])
    # What `disable` would do; stopping a running one needs the manager.
    (unit_dir() / WANTED_BY / UNIT_NAME).unlink(missing_ok=True)
    print("No systemd user manager is reachable from here; where one is, run:")
    print(f"  systemctl --user stop {UNIT_STEM} && systemctl --user daemon-reload")
    return 0
