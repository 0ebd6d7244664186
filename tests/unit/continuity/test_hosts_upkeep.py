"""The shared workers' upkeep (router/sessions/hosts.py) survives a failure: an empty host whose
end failed once is ended at the next tick, and the loop goes on."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio

from router.sessions.hosts import Host, Hosts


class FlakySupervisor:
    """Its first ``forget`` fails (a directory that would not go), the next ones work."""

    def __init__(self) -> None:
        self.forgotten: list[str] = []
        self.done = anyio.Event()
        self.failed = 0
        self.listeners: list[Any] = []

    def add_exit_listener(self, cb: Any) -> None:
        self.listeners.append(cb)

    def remove_exit_listener(self, cb: Any) -> None:
        self.listeners.remove(cb)

    async def forget(self, worker_id: str) -> None:
        if not self.failed:
            self.failed += 1
            raise RuntimeError("rmtree failed")
        self.forgotten.append(worker_id)
        self.done.set()


async def test_an_empty_host_whose_end_failed_is_ended_at_the_next_tick() -> None:
    supervisor = FlakySupervisor()
    released: list[str] = []
    admission: Any = SimpleNamespace(release=released.append, max_live_workers=2)

    async def aclose() -> None:
        return None

    keeper: Any = SimpleNamespace(connection=SimpleNamespace(aclose=aclose))
    worker: Any = SimpleNamespace(session_id="host-x", pid=1, port=1, alive=lambda: True, stopping=False)
    hosts = Hosts(admission=admission, supervisor=supervisor, capacity=2, idle_timeout=0.05,  # type: ignore[arg-type]
                  health_interval=3600)  # fmt: skip
    hosts._hosts["host-x"] = Host("host-x", worker, keeper, empty_since=0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(hosts.run)
        with anyio.fail_after(5):
            await supervisor.done.wait()
        tg.cancel_scope.cancel()
    assert supervisor.failed == 1 and supervisor.forgotten == ["host-x"]
    assert len(hosts) == 0 and "host-x" in released
