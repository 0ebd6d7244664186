"""Routers for tests: the real app served by uvicorn in a thread, with the stand-in or the real worker."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from router.cli.main import server_config
from router.http.app import create_app
from router.http.auth import token_path
from router.settings import Settings
from tests.support import handshake_seeds
from tests.support.auth import seed_token
from tests.support.wait import wait_for
from workers.orphans import processes_for
from workers.ports import spare_port

ROOT = Path(__file__).resolve().parents[2]
FAKE_WORKER = ROOT / "tests" / "fakes" / "fake_worker.py"
FAKE_WORKER_COMMAND = [sys.executable, str(FAKE_WORKER), "{port}"]
# Stdlib only, starts in tens of milliseconds, shaped like Playwright's worker (tests/fakes/standin_worker.py):
# for runs with many spawns (the soak, the lifecycle model).
STANDIN_WORKER_COMMAND = [sys.executable, "-S", str(ROOT / "tests" / "fakes" / "standin_worker.py"), "{port}"]
SHUTDOWN_TIMEOUT = 30.0
# Real workers (node + Chromium) take longer to go than the stand-in.
REAL_WORKERS_GONE_TIMEOUT = 20.0


@contextmanager
def asgi_in_thread(app: Any, **config: Any) -> Iterator[int]:
    """A bare ASGI app under uvicorn (lifespan off) on a free loopback port; yields the port."""
    port = spare_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off", **config)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class RouterThread:
    """A real uvicorn serving the real app on a free loopback port, in a background thread."""

    def __init__(self, settings: Settings, *, access_log: bool = False) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.port = settings.port
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base_url}/mcp"
        # Served as `serve` serves it: the same protocol (bounded heads) and options.
        self.server = uvicorn.Server(server_config(self.app, "127.0.0.1", self.port, access_log=access_log))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> RouterThread:
        seeded = handshake_seeds.seed(self.manager, self.settings)
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive())
        if not self.server.started:
            raise RuntimeError("router did not start")
        # Sessions start lazily once the handshake cache is filled: tests see one behaviour.
        wait_for(lambda: self.manager.handshake_probed, timeout=30)
        if not seeded:
            handshake_seeds.keep(self.manager, self.settings)
        return self

    def __exit__(self, *exc: object) -> None:
        self.app.state.manager.request_stop()  # as the CLI's signal handler does: held streams end
        self.server.should_exit = True
        self.thread.join(timeout=SHUTDOWN_TIMEOUT)
        assert not self.thread.is_alive(), "router did not shut down"

    @property
    def manager(self) -> Any:
        return self.app.state.manager

    @property
    def token(self) -> str:
        return token_path(Path(self.settings.state_dir)).read_text().strip()


def router_settings(tmp: Path, **overrides: Any) -> Settings:
    """Settings for a router on a free port with the stand-in worker and the record off."""
    values: dict[str, Any] = {
        "port": spare_port(),
        "state_dir": tmp,
        "worker_command": FAKE_WORKER_COMMAND,
        "keepalive_interval": 15.0,
        "record": False,
        # Off unless a test is about it: a reserve worker would outlive the reaps tests wait for.
        "resume_reserve": 0,
    }
    values.update(overrides)
    seed_token(Path(values["state_dir"]))
    return Settings(**values)


@contextmanager
def playwright_router(state: Path, chromium: str, **overrides: Any) -> Iterator[RouterThread]:
    """A router with real @playwright/mcp workers; on the way out, nothing of it may be left."""
    settings = router_settings(state, worker_command=None, browser=chromium, record=True, **overrides)
    with RouterThread(settings) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=REAL_WORKERS_GONE_TIMEOUT)
