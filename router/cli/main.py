"""`mcp-router`: serve, and read the record."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from router.operator.logs import configure_logging
from router.settings import Settings

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("mcp_router.serve")

EXIT_FAILED: Final = 1  # a core part died, or start-up failed: systemd's Restart=on-failure restarts
EXIT_STATE_LOCKED: Final = 75  # EX_TEMPFAIL: another router holds the state directory
PRIVATE_UMASK: Final = 0o077  # state dir 0700, files 0600: records, cookies and profiles are private
EXIT_REFUSED: Final = 2


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the router (flags override MCP_ROUTER_* variables)")
    p.set_defaults(func=_run_serve)
    add_serve_arguments(p)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `serve`; `token` takes them too, so it finds the same state dir and port."""
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--state-dir")
    p.add_argument("--idle-timeout", type=float, help="seconds without client requests before reaping")
    p.add_argument("--max-sessions", type=int, help="known session ids at most (live or dormant)")
    p.add_argument("--max-live-workers", type=int, help="browser workers at once (default: RAM / 600 MiB)")
    p.add_argument("--session-retention-hours", type=float, help="how long a dormant session stays resumable")
    p.add_argument("--retention-days", type=float, help="how long the record keeps calls")
    p.add_argument("--warm-workers", type=int, help="workers kept spawned ahead of demand, browser launched")
    p.add_argument(
        "--resume-reserve", type=int, help="warm workers kept while browsed sessions sleep (default 1; 0: none)"
    )
    p.add_argument(
        "--sessions-per-browser", type=int,
        help="client sessions sharing one worker's browser, each in its own context (default 1: a worker each)",
    )
    p.add_argument(
        "--keep-warm-interval",
        type=float,
        help="seconds between the calls that keep a waiting warm worker warm (default 30; 0: off)",
    )
    p.add_argument(
        "--bring-ups", type=int, help="workers started (spawn, browser launch, restore) at once (default: one per core)"
    )
    p.add_argument("--browser", help="path of the Chromium binary")
    p.add_argument("--headed", dest="headless", action="store_const", const=False, default=None)
    p.add_argument("--viewport", help="e.g. 1280x720")
    p.add_argument("--worker-arg", dest="worker_args", action="append", help="extra worker flag (repeat)")
    p.add_argument("--worker-command", help="worker argv template with {port}; shell-split")
    p.add_argument(
        "--allow-tool", dest="allow_tools", action="append", help="offer a tool that is off by default (repeat)"
    )
    p.add_argument("--deny-tool", dest="deny_tools", action="append", help="hide and refuse a worker tool (repeat)")
    p.add_argument("--allowed-origin", dest="allowed_origins", action="append")
    p.add_argument("--allowed-host", dest="allowed_hosts", action="append")
    p.add_argument("--auth", choices=["token", "none"], help="token (default), or none on a loopback bind only")
    p.add_argument("--browse-allow", dest="browse_allow", action="append", metavar="ORIGIN",
                   help="origins the browsers may request (repeat; a convenience, not a security boundary)")
    p.add_argument("--browse-block", dest="browse_block", action="append", metavar="ORIGIN",
                   help="origins the browsers may not request (repeat; checked before --browse-allow)")
    p.add_argument("--responses", choices=["full", "compact"])
    p.add_argument("--node-id", help="this host's name behind a balancer: session ids start with it (deploy/)")
    p.add_argument("--cluster-node", dest="cluster_nodes", action="append", metavar="URL",
                   help="a cluster node's base URL (repeat, this one's too): the dashboard lists all their sessions")
    p.add_argument("--no-record", dest="record", action="store_const", const=False, default=None)
    p.add_argument("--log-level")
    p.add_argument("--log-format", choices=["text", "json"])


LOCAL_OPTIONS: Final = ("command", "func", "connect")  # parsed flags that are not settings


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {
        key: value
        for key, value in vars(args).items()
        if key not in LOCAL_OPTIONS and value is not None
    }
    if isinstance(overrides.get("worker_command"), str):
        import shlex

        overrides["worker_command"] = shlex.split(overrides["worker_command"])
    return Settings(**overrides)


def serve(settings: Settings) -> int:
    from router.http.auth import bind_problem
    from router.state_lock import StateDirLocked, StateLock

    problem = bind_problem(settings.host, settings.auth)
    if problem is not None:
        print(f"mcp-router: refusing to start: {problem}", file=sys.stderr)
        return EXIT_REFUSED
    os.umask(PRIVATE_UMASK)
    configure_logging(settings.log_level, settings.log_format)
    # Before anything touches the state directory: the orphan sweep at start-up would end the
    # workers of a router already serving it.
    lock = StateLock(Path(settings.state_dir))
    try:
        lock.acquire()
    except StateDirLocked as exc:
        log.error("%s; refusing to start", exc)
        return EXIT_STATE_LOCKED
    try:
        return _serve_locked(settings)
    finally:
        lock.release()


def server_config(app: Any, host: str, port: int, *, access_log: bool = False) -> uvicorn.Config:
    """How the router's app is served: `serve` and the tests' routers run the same server.
    ``access_log`` only for a test that reads it."""
    import uvicorn

    from router.http.limits import KEEP_ALIVE_TIMEOUT_S, concurrency_limit, limited_protocol, raise_open_files_limit

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        # No access log: a URL may carry ?token= (the auth middleware also strips it first).
        access_log=access_log,
        timeout_graceful_shutdown=5,
        lifespan="on",
        # Bounded request heads (size, fields, time to send) and connections at once.
        http=limited_protocol(),
        limit_concurrency=concurrency_limit(raise_open_files_limit()),
        timeout_keep_alive=KEEP_ALIVE_TIMEOUT_S,
        # Nothing reads the client's address or scheme (no access log, relative redirects), so
        # uvicorn's X-Forwarded-* rewrite is a middleware every call would pay for nothing.
        proxy_headers=False,
    )


def _serve_locked(settings: Settings) -> int:
    import uvicorn

    from router.http.app import create_app

    app = create_app(settings)
    config = server_config(app, settings.host, settings.port)
    manager = app.state.manager
    health = app.state.health

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Held SSE streams never end by themselves; without this, SIGTERM waits them out.
            manager.request_stop()
            super().handle_exit(sig, frame)

    server = Server(config)

    def shut_down(component: str, reason: str) -> None:
        # A process whose core part is gone answers every client with an error: end it, so that
        # the service manager starts a working one.
        manager.request_stop()
        server.should_exit = True

    health.on_failure(shut_down)
    server.run()
    if not server.started:
        log.error("the router did not start")
        return EXIT_FAILED
    if not health.ok:
        log.error("exiting after a failure: %s", health.failures)
        return EXIT_FAILED
    return 0


def _run_serve(args: argparse.Namespace) -> int:
    return serve(settings_from_args(args))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mcp-router", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    # Each further command lives in its own module: register(sub) adds a parser whose
    # `func` default takes the parsed args and returns the exit status.
    for register in _command_modules():
        register(sub)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def _command_modules() -> list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]]:
    from router.cli import doctor
    from router.cli import records as cli_records
    from router.cli import service as cli_service
    from router.cli import stdio as cli_stdio
    from router.cli import token as cli_token

    return [cli_records.register, cli_token.register, doctor.register, cli_stdio.register, cli_service.register]

