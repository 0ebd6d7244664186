"""Test helpers: a router in a thread, a raw Streamable-HTTP client, and waiting on conditions.

Routers under test ask for a token like any other: ``router_settings`` puts TEST_TOKEN into the
state dir's token file before the router starts (the router reads a token file it finds, as it
does on every start but the first), and ``RawClient`` shows it unless told otherwise
(``token=None`` for a client without one). ``auth_headers()`` is the same for plain httpx calls.
Routers started as processes get it the same way: ``seed_token(state_dir)`` before the start.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from router.http.app import create_app
from router.http.auth import token_path
from router.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
FAKE_WORKER = ROOT / "tests" / "fakes" / "fake_worker.py"
FAKE_WORKER_COMMAND = [sys.executable, str(FAKE_WORKER), "{port}"]
ACCEPT_BOTH = "application/json, text/event-stream"
WAIT_TIMEOUT = 20.0
TEST_TOKEN = "test-token-" + "0123456789abcdef" * 3  # long enough for the router's weak-token check


def seed_token(state_dir: Path, token: str = TEST_TOKEN) -> str:
    """Give a state dir the tests' token (unless it has one already); returns the token in force."""
    path = token_path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(token + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


def auth_headers(token: str | None = TEST_TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def wait_for(condition: Callable[[], Any], timeout: float = WAIT_TIMEOUT, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {condition}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RouterThread:
    """A real uvicorn serving the real app on a free loopback port, in a background thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.port = settings.port
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_config=None, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> RouterThread:
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive())
        if not self.server.started:
            raise RuntimeError("router did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.app.state.manager.request_stop()  # as the CLI's signal handler does: held streams end
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "router did not shut down"

    @property
    def manager(self) -> Any:
        return self.app.state.manager

    @property
    def token(self) -> str:
        return token_path(Path(self.settings.state_dir)).read_text().strip()


def router_settings(tmp: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "port": free_port(),
        "state_dir": tmp,
        "worker_command": FAKE_WORKER_COMMAND,
        "keepalive_interval": 15.0,
        "record": False,
    }
    values.update(overrides)
    seed_token(Path(values["state_dir"]))
    return Settings(**values)


def sse_messages(body: str) -> list[dict[str, Any]]:
    out = []
    for event in body.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")]
        if data:
            out.append(json.loads("\n".join(data)))
    return out


def messages_of(response: httpx.Response) -> list[dict[str, Any]]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return sse_messages(response.text)
    return [response.json()]


def initialize_body(id: int = 1, version: str = "2025-06-18", name: str = "test-client") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": name, "version": "1"},
        },
    }


class RawClient:
    """Speaks Streamable HTTP by hand, so tests see every status code and header."""

    def __init__(self, url: str, *, host: str | None = None, token: str | None = TEST_TOKEN) -> None:
        self.url = url
        # The token on every request, those tests send through .http with headers of their own too.
        self.http = httpx.Client(timeout=30, trust_env=False, headers=auth_headers(token))
        self.session_id: str | None = None
        self._next_id = 100
        self.host = host
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        h = {"content-type": "application/json", "accept": ACCEPT_BOTH, **auth_headers(self.token)}
        if self.session_id:
            h["mcp-session-id"] = self.session_id
        if self.host:
            h["host"] = self.host
        h.update(extra)
        return h

    def post(self, body: Any, **headers: str) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(self.url, content=content, headers=self.headers(**headers))

    def initialize(self, **kw: Any) -> httpx.Response:
        response = self.post(initialize_body(**kw))
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        note = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert note.status_code == 202, note.text
        return response

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            body["params"] = params
        response = self.post(body)
        assert response.status_code == 200, response.text
        answers = [m for m in messages_of(response) if m.get("id") == self._next_id]
        assert answers, response.text
        return answers[-1]

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def text(self, tool: str, **arguments: Any) -> str:
        answer = self.call(tool, **arguments)
        assert "result" in answer, answer
        return "".join(p.get("text", "") for p in answer["result"]["content"])

    def delete(self) -> httpx.Response:
        return self.http.delete(self.url, headers=self.headers())

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_sse(response: httpx.Response) -> Iterator[dict[str, Any]]:
    buffer = ""
    for chunk in response.iter_text():
        buffer = (buffer + chunk).replace("\r\n", "\n")
        while "\n\n" in buffer:
            event, buffer = buffer.split("\n\n", 1)
            data = [line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")]
            if data:
                yield json.loads("\n".join(data))
            elif event.startswith(":"):
                yield {"comment": event}


@contextmanager
def playwright_router(state: Path, chromium: str, **overrides: Any) -> Iterator[RouterThread]:
    """A router with real @playwright/mcp workers; on the way out, nothing of it may be left."""
    from workers.orphans import processes_for

    settings = router_settings(state, worker_command=None, browser=chromium, record=True, **overrides)
    with RouterThread(settings) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=20)
