"""The ASGI application: routes, middleware, and a lifespan that owns every long-lived part."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from router.cli import admin
from router.http.auth import (
    STATE_KEY,
    AuthMiddleware,
    TokenAuth,
    bind_problem,
    load_or_create_token,
    private_state_dir,
)
from router.http.endpoint import McpEndpoint
from router.http.errors import ServiceUnavailable
from router.http.security import OriginPolicy, SecurityMiddleware
from router.operator.api import Api
from router.operator.metrics import Metrics, TimedEndpoint
from router.operator.ui import Ui
from router.sessions.manager import SessionManager
from router.settings import Settings
from router.types import MCP_ENDPOINT
from workers.spec import (
    ALLOWED_HOSTS_ENV,
    WorkerSpec,
    browse_env,
    default_cli_path,
    playwright_argv,
    sandbox_possible,
)
from workers.supervisor import Supervisor

DB_NAME = "router.db"
# Every name under which a browser on this machine reaches a loopback-bound router
# ("localhost." is localhost to Chromium; 0.0.0.0 reaches loopback on Linux).
ROUTER_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]", "localhost.", "0.0.0.0")
WILDCARD_BINDS: Final = frozenset({"0.0.0.0", "::", ""})


def router_origins(host: str, port: int) -> list[str]:
    """The origins of this router, which the workers' browsers are told never to request."""
    names = list(ROUTER_LOOPBACK_NAMES)
    if host not in WILDCARD_BINDS:
        name = f"[{host}]" if ":" in host and not host.startswith("[") else host
        if name.lower() not in names:
            names.append(name.lower())
    return [f"http://{name}:{port}" for name in names]


def build_supervisor(settings: Settings) -> Supervisor:
    builtin = not settings.worker_command
    argv = settings.worker_command or playwright_argv(
        headless=settings.headless,
        viewport=settings.viewport,
        extra_args=settings.worker_args,
        sandbox=sandbox_possible(),
    )
    if settings.worker_command and settings.worker_args:
        argv = [*argv, *settings.worker_args]
    env = browse_env(
        allow=settings.browse_allow,
        block=[*router_origins(settings.host, settings.port), *settings.browse_block],
    )
    spec = WorkerSpec(
        argv_template=tuple(argv),
        env=env,
        ready_timeout=settings.ready_timeout,
        stop_grace=settings.stop_grace,
        # The built-in worker answers only its secret host name; a custom command may be any
        # MCP server, which would refuse a Host it does not know.
        allowed_hosts_env=ALLOWED_HOSTS_ENV if builtin else None,
    )
    return Supervisor(
        spec=spec,
        state_dir=settings.state_dir,
        browser=settings.browser_path() or "chromium",
        cli=str(default_cli_path()),
    )


def continuity_options(settings: Settings) -> dict[str, Any]:
    """The manager's issue-4 knobs: live-worker cap, retention, health checks, restart budget."""
    return {
        "max_live_workers": settings.max_live_workers,
        "warm_workers": settings.warm_workers,
        "retention": settings.session_retention_hours * 3600.0,
        "health_interval": settings.health_interval,
        "budget": (settings.max_restarts, settings.restart_window, tuple(settings.restart_backoff)),
    }


def create_app(settings: Settings) -> Starlette:
    problem = bind_problem(settings.host, settings.auth)
    if problem is not None:
        raise ValueError(problem)
    state_dir = private_state_dir(Path(settings.state_dir))
    auth = TokenAuth(load_or_create_token(state_dir), port=settings.port) if settings.auth == "token" else None
    supervisor = build_supervisor(settings)
    recorder = None
    if settings.record:
        from router.record.recorder import Recorder

        recorder = Recorder(state_dir / DB_NAME, retention_days=settings.retention_days)
    metrics = Metrics()
    manager = SessionManager(
        supervisor=supervisor,
        recorder=recorder,
        idle_timeout=settings.idle_timeout,
        max_sessions=settings.max_sessions,
        metrics=metrics,
        **continuity_options(settings),
    )
    metrics.watch(manager, state_dir / DB_NAME if recorder is not None else None)
    endpoint = McpEndpoint(
        manager,
        max_body_bytes=settings.max_body_bytes,
        keepalive_interval=settings.keepalive_interval,
        response_mode=settings.responses,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(supervisor.run())
            if recorder is not None:
                await stack.enter_async_context(recorder.run())
            await stack.enter_async_context(manager.run())
            stack.enter_context(admin.router_file(state_dir, settings.host, settings.port))
            yield

    async def healthz(request: Request) -> JSONResponse:
        if not request.scope.get("state", {}).get(STATE_KEY):
            return JSONResponse({"status": "ok"})  # open to all: liveness, nothing more
        return JSONResponse(
            {
                "status": "ok",
                "sessions": len(manager.sessions.live()),
                "workers": supervisor.live_count,
                "warm_workers": len(manager.pool),
            }
        )

    app = Starlette(
        routes=[
            Route(MCP_ENDPOINT, TimedEndpoint(endpoint, metrics), methods=None),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics.endpoint, methods=["GET"]),
            *Api(manager).routes(),
            *Ui().routes(),
            *(auth.routes() if auth is not None else []),
        ],
        middleware=[
            Middleware(
                SecurityMiddleware,
                policy=OriginPolicy(settings.allowed_hosts, settings.allowed_origins),
            ),
            Middleware(AuthMiddleware, auth=auth),
        ],
        lifespan=lifespan,
    )
    app.state.manager = manager
    app.state.metrics = metrics
    app.state.settings = settings
    app.state.auth = auth
    return app


__all__ = ["ServiceUnavailable", "create_app"]
