"""The router's uvicorn server (router/http/ticking.py) wakes once a second, not ten times, and a
stop asked for from any thread wakes it at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import httpx
import uvicorn

from router.http.ticking import RouterServer
from tests.support.wait import wait_for
from workers.ports import spare_port

STOPPED_WITHIN: Final = 10.0
WINDOW_S: Final = 1.2  # a second and a bit: uvicorn's own loop ticks 12 times in it


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


class CountingServer(RouterServer):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


@contextmanager
def served(tick_s: float | None = None) -> Iterator[tuple[CountingServer, threading.Thread, int]]:
    port = spare_port()
    server = CountingServer(uvicorn.Config(_app, host="127.0.0.1", port=port, log_config=None, lifespan="off"))
    if tick_s is not None:
        server.tick_s = tick_s
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started)
        yield server, thread, port
    finally:
        server.should_exit = True
        thread.join(timeout=STOPPED_WITHIN)


def test_a_stop_asked_from_another_thread_wakes_the_server_at_once() -> None:
    with served(tick_s=3600.0) as (server, thread, port):
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 204
        server.should_exit = True
        # With an hour's tick, only the wake-up can end it in time.
        wait_for(lambda: not thread.is_alive(), timeout=STOPPED_WITHIN)


def test_the_idle_server_ticks_once_a_second() -> None:
    with served() as (server, _, port):
        before = server.ticks
        time.sleep(WINDOW_S)  # the window measured, not a wait for a condition
        assert server.ticks - before <= 2, f"{server.ticks - before} ticks in {WINDOW_S} s"
        answer = httpx.get(f"http://127.0.0.1:{port}/")
        assert answer.status_code == 204 and answer.headers.get("date")  # still renewed on each tick
