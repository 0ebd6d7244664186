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

from router.catalog.answers import Catalog
from router.catalog.prompts import PromptLibrary
from router.catalog.resources import ResourceCatalog
from router.errors import ServiceUnavailable
from router.health import Health
from router.http.auth import (
    STATE_KEY,
    AuthMiddleware,
    TokenAuth,
    bind_problem,
    load_or_create_token,
    private_state_dir,
)
from router.http.endpoint import McpEndpoint
from router.http.exchange import ExchangeHooks
from router.http.limits import MAX_HEAD_BYTES
from router.http.security import OriginPolicy, SecurityMiddleware
from router.http.timing import TimedEndpoint
from router.http.tool_policy import ToolPolicy
from router.layout import StateLayout
from router.operator.api import Api
from router.operator.cluster_view import ClusterView
from router.operator.metrics import Metrics
from router.operator.ui import Ui
from router.router_file import router_file
from router.sessions.handshake import HandshakeCache, worker_fingerprint
from router.sessions.manager import SessionManager
from router.sessions.resume_notice import on_tool_answer
from router.settings import Settings
from router.types import HEALTHZ_PATH, MCP_ENDPOINT, METRICS_PATH
from workers.spec import (
    ALLOWED_HOSTS_ENV,
    WorkerSpec,
    browse_env,
    default_cli_path,
    playwright_argv,
    sandbox_possible,
)
from workers.supervisor import Supervisor

# Every name under which a browser on this machine reaches a loopback-bound router
# ("localhost." is localhost to Chromium; 0.0.0.0 reaches loopback on Linux).
ROUTER_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]", "localhost.", "0.0.0.0")
WILDCARD_BINDS: Final = frozenset({"0.0.0.0", "::", ""})
# A head the router took must reach its worker whole: the router's Host and session id for the
# worker are longer than the client's, and node counts fields without their ": " and CRLF.
WORKER_HEAD_HEADROOM: Final = 1024


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
        isolated=settings.sessions_per_browser > 1,
        max_header_bytes=MAX_HEAD_BYTES + WORKER_HEAD_HEADROOM,
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


def handshake_fingerprint(supervisor: Supervisor) -> str:
    """What the cached handshake depends on: the worker's command and every file it names, and
    the pinned package (router/sessions/handshake.py)."""
    spec = supervisor.spec
    files = [Path(token) for token in spec.argv_template if "{" not in token and Path(token).is_file()]
    if any("{cli}" in token for token in spec.argv_template):
        files.append(Path(supervisor.cli))
    workers_dir = default_cli_path().parents[3]
    files += [workers_dir / "package-lock.json", Path(default_cli_path()).parent / "package.json"]
    return worker_fingerprint(spec.argv_template, spec.env, files)


def continuity_options(settings: Settings) -> dict[str, Any]:
    """The manager's continuity knobs: live-worker cap, retention, health checks, restart budget."""
    return {
        "max_live_workers": settings.max_live_workers,
        "warm_workers": settings.warm_workers,
        "resume_reserve": settings.resume_reserve,
        "sessions_per_browser": settings.sessions_per_browser,
        "keep_warm_interval": settings.keep_warm_interval,
        "bring_ups": settings.bring_ups,
        "retention": settings.session_retention_hours * 3600.0,
        "health_interval": settings.health_interval,
        "budget": (settings.max_restarts, settings.restart_window, tuple(settings.restart_backoff)),
    }


def public_health(failures: dict[str, str], node_id: str | None) -> dict[str, Any]:
    """What /healthz tells anyone: liveness, and the node id when there is one."""
    body: dict[str, Any] = {"status": "failing" if failures else "ok"}
    if node_id is not None:
        body["node"] = node_id
    return body


def create_app(settings: Settings) -> Starlette:
    problem = bind_problem(settings.host, settings.auth)
    if problem is not None:
        raise ValueError(problem)
    layout = StateLayout(private_state_dir(Path(settings.state_dir)))
    # --auth none opens /mcp to every local process; the dashboard and /api still ask for the
    # token (router/http/auth.py says why).
    open_paths = frozenset({MCP_ENDPOINT, METRICS_PATH, HEALTHZ_PATH}) if settings.auth == "none" else frozenset()
    token = load_or_create_token(layout.root)
    auth = TokenAuth(token, port=settings.port, open_paths=open_paths)
    supervisor = build_supervisor(settings)
    health = Health()
    recorder = None
    if settings.record:
        from router.record.recorder import Recorder

        recorder = Recorder(
            layout.db, layout=layout, retention_days=settings.retention_days,
            on_writer_failure=health.reporter("recorder"),
        )
    metrics = Metrics()
    manager = SessionManager(
        supervisor=supervisor,
        recorder=recorder,
        handshakes=HandshakeCache(layout.root, handshake_fingerprint(supervisor)),
        layout=layout,
        idle_timeout=settings.idle_timeout,
        max_sessions=settings.max_sessions,
        metrics=metrics,
        node_id=settings.node_id,
        **continuity_options(settings),
    )
    metrics.watch(manager.stats, *((recorder.stats, layout.db) if recorder is not None else (None, None)))
    shared_browsers = settings.sessions_per_browser > 1
    hooks = ExchangeHooks(
        recorder=recorder,
        metrics=metrics,
        tool_policy=ToolPolicy.build(
            worker_args=settings.worker_args, allow=settings.allow_tools, deny=settings.deny_tools,
            shared_browser=shared_browsers,
        ),
        cached_answer=manager.requests.cached_answer,
        renew_browser=manager.renew_browser,
        on_tool_answer=on_tool_answer,
        browsers=manager.browsers,
        catalog=Catalog(
            ResourceCatalog(
                records=lambda: recorder.records if recorder is not None else None,
                files_dir=layout.files_dir,
                viewport=settings.viewport,
            ),
            PromptLibrary(layout.prompts_dir),
        ),
        shares_worker=manager.continuity.shares if shared_browsers else None,
    )
    endpoint = McpEndpoint(
        manager,
        hooks,
        max_body_bytes=settings.max_body_bytes,
        keepalive_interval=settings.keepalive_interval,
        response_mode=settings.responses,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started = False
        try:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(supervisor.run())
                if recorder is not None:
                    await stack.enter_async_context(recorder.run())
                await stack.enter_async_context(manager.run())
                stack.enter_context(router_file(layout, settings.host, settings.port))
                started = True
                yield
        except Exception as exc:
            # A task group of a core part failed while serving: uvicorn would log it and serve on
            # with nothing behind the routes. Reported, it makes /healthz 503 and `serve` exit.
            if started:
                health.fail("core", f"a core task failed: {exc!r}")
            raise

    async def healthz(request: Request) -> JSONResponse:
        failures = health.failures
        status = 503 if failures else 200
        if not request.scope.get("state", {}).get(STATE_KEY):
            # Open to all: liveness (and failure, for systemd and balancers) and which node
            # answered (already in every id it mints, so no secret): a balancer checks that its
            # map and the nodes agree. How busy the node is needs the token; a full node is told
            # apart by its 503 to initialize, which balancers retry elsewhere. Never 503 here when
            # merely full: a balancer would take the node out, and its working sessions with it.
            return JSONResponse(public_health(failures, manager.node_id), status_code=status)
        now = manager.stats()
        body: dict[str, Any] = {
            **public_health(failures, manager.node_id),
            "accepting": now.accepting,
            "sessions": now.sessions,
            "workers": now.live_workers,
            "slots": now.slots,  # held or being filled: equal to workers once settled
            "warm_workers": now.warm_workers,
            # Warm workers held for dormant sessions' resumes: counted in workers and warm_workers,
            # serving no session (session_workers are the ones that do).
            "reserve": now.reserve_workers,
            "reserve_max": now.resume_reserve,
            "session_workers": now.session_workers,
            "capacity": {"sessions": now.max_sessions, "workers": now.max_live_workers},
            # Workers sessions share (--sessions-per-browser > 1); session_workers then counts sessions.
            "hosts": now.hosts,
            "sessions_per_browser": now.sessions_per_browser,
        }
        if failures:
            body["failures"] = failures
        if recorder is not None:
            stats = recorder.stats()
            body["record"] = {
                "failing": stats.failing,
                "failed_batches": stats.failed_batches,
                "failed_rows": stats.failed_rows,
                "dropped": stats.dropped,
                "queue": stats.queue_len,
                "queue_bytes": stats.queue_bytes,
            }
        return JSONResponse(body, status_code=503 if failures else 200)

    security = {"policy": OriginPolicy(settings.allowed_hosts, settings.allowed_origins)}
    app = Starlette(
        routes=[
            Route(MCP_ENDPOINT, TimedEndpoint(endpoint, metrics), methods=None),
            Route(HEALTHZ_PATH, healthz, methods=["GET"]),
            Route(METRICS_PATH, metrics.endpoint, methods=["GET"]),
            *Api(manager, lambda: recorder.records if recorder is not None else None, layout).routes(),
            *ClusterView(settings.cluster_nodes, token, settings.node_id).routes(),
            *Ui().routes(),
            *auth.routes(),
        ],
        middleware=[
            Middleware(SecurityMiddleware, **security),
            Middleware(AuthMiddleware, auth=auth),
        ],
        lifespan=lifespan,
    )
    app.state.manager = manager
    app.state.health = health
    app.state.metrics = metrics
    app.state.settings = settings
    app.state.auth = auth
    return app


__all__ = ["ServiceUnavailable", "create_app"]
