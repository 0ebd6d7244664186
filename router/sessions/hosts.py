"""Workers that carry several client sessions (``--sessions-per-browser N``, N > 1).

Such a worker runs ``@playwright/mcp --isolated``: one browser, and a fresh browser context for
each MCP session on it. A client session that needs a browser gets a place on the fullest host
that has one (fewest browsers running), else a new host in a free worker slot, else the longest
idle session anywhere is hibernated to free its place (``evict``). Its own MCP session on the host
is its context: the router saves and restores its browser state through that session (a session
of the router's own would see another context), and a DELETE of it closes the context only.

Each host keeps one MCP session of the router's own, the *keeper*, which launched the browser and
holds it open: @playwright/mcp closes the browser when the last session that used it ends, and a
host between two conversations should not pay a browser launch. A host with no client session
left is ended after ``idle_timeout``. Hosts are health-checked here, as a whole: a host that stops
answering is ended, and its exit reaches each of its sessions as a crash (``Upkeep``), each
resuming on its next call.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from router.errors import RouterError, ServiceUnavailable
from router.sessions.admission import BUSY_RETRY_AFTER, Admission
from router.sessions.control import ControlError, ControlSession
from router.upstream.connection import WorkerConnection
from workers._exceptions import WorkerError
from workers.health import HEALTH_FAILURES, probe
from workers.supervisor import Supervisor, Worker

log = logging.getLogger("mcp_router.hosts")

HOST_PREFIX: Final = "host-"
LAUNCH_TOOL: Final = "browser_tabs"  # the keeper's first call launches the host's browser
LAUNCH_ARGS: Final = {"action": "list"}
HOSTS_TICK: Final = 1.0  # how often empty hosts are looked at

# Frees a place on some host for the session ``for_id`` (hibernates another); False: none to free.
Evict = Callable[[str], Awaitable[bool]]


@dataclass(eq=False)
class Host:
    id: str
    worker: Worker
    keeper: ControlSession
    sessions: set[str] = field(default_factory=set)
    empty_since: float | None = None  # monotonic; None while it carries a session
    health_failures: int = 0

    def describe(self, pss: int | None = None) -> dict[str, Any]:
        """What /api and the CLI show of it; ``pss``: its whole process tree's memory."""
        return {
            "id": self.id, "pid": self.worker.pid, "port": self.worker.port,
            "sessions": len(self.sessions), "pss_bytes": pss,
        }  # fmt: skip


class Hosts:
    def __init__(
        self, *, admission: Admission, supervisor: Supervisor, capacity: int, idle_timeout: float,
        health_interval: float,
    ) -> None:  # fmt: skip
        self.admission = admission
        self.supervisor = supervisor
        self.capacity = max(2, capacity)
        self.idle_timeout = idle_timeout
        self.health_interval = health_interval
        self.evict: Evict | None = None  # set by the manager: hibernate the least recent session
        # Whether the last host up stays up empty (the resume reserve: a browsed session sleeps).
        self.keep_last: Callable[[], bool] = lambda: False
        self._hosts: dict[str, Host] = {}
        self._placing = anyio.Lock()  # one placement at a time: two must not both start a host

    # -- queries ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._hosts)

    def owns(self, worker_id: str) -> bool:
        return worker_id in self._hosts

    def shares(self, worker: Worker) -> bool:
        """Whether ``worker`` is a host (its sessions leave it; they never end it)."""
        host = self._hosts.get(worker.session_id)
        return host is not None and host.worker is worker

    def host_of(self, session_id: str) -> Host | None:
        return next((h for h in self._hosts.values() if session_id in h.sessions), None)

    def all(self) -> list[Host]:
        return list(self._hosts.values())

    def describe(self, memory: Mapping[str, int]) -> list[dict[str, Any]]:
        """Each host with its sessions' count and its memory (``memory``: PSS by worker id)."""
        return [
            {**h.describe(memory.get(h.id)), "capacity_left": self.capacity - len(h.sessions)} for h in self.all()
        ]

    # -- placing and leaving ---------------------------------------------------------------------

    async def place(self, session_id: str) -> Worker:
        """A host with a place for the session, the place taken (``leave`` gives it back)."""
        async with self._placing:
            while True:
                host = self.host_of(session_id) or self._roomiest()
                if host is not None:
                    host.sessions.add(session_id)
                    host.empty_since = None
                    return host.worker
                host_id = HOST_PREFIX + secrets.token_hex(12)
                if self.admission.try_admit(host_id):
                    host = await self._start(host_id)
                    continue
                if self.evict is None or not await self.evict(session_id):
                    raise ServiceUnavailable(
                        f"All {self.admission.max_live_workers} browser workers are full "
                        f"({self.capacity} sessions each); retry shortly",
                        retry_after=BUSY_RETRY_AFTER,
                    )

    def leave(self, session_id: str) -> None:
        """Synchronous: the place is free before anyone else can look."""
        for host in self._hosts.values():
            if session_id in host.sessions:
                host.sessions.discard(session_id)
                if not host.sessions:
                    host.empty_since = time.monotonic()

    def _roomiest(self) -> Host | None:
        """The fullest live host that still has a place: sessions packed onto few browsers."""
        open_hosts = [
            h for h in self._hosts.values()
            if len(h.sessions) < self.capacity and h.worker.alive() and not h.worker.stopping
        ]  # fmt: skip
        return max(open_hosts, key=lambda h: len(h.sessions), default=None)

    async def _start(self, host_id: str) -> Host:
        """A new host: spawned in the slot its caller took, its keeper's call launching the browser."""
        started = time.monotonic()
        worker = await self.admission.spawn(host_id, admitted=True)
        keeper = ControlSession(WorkerConnection(worker))
        try:
            await keeper.open()
            if LAUNCH_TOOL in await keeper.tool_names():  # a stand-in worker may have no browser
                await keeper.call(LAUNCH_TOOL, LAUNCH_ARGS)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await keeper.connection.aclose()
                await self.supervisor.forget(host_id)
            self.admission.release(host_id)
            if isinstance(exc, ControlError):
                raise ServiceUnavailable(
                    f"Could not start a browser worker: {exc}", data={"stderr": worker.stderr_tail()},
                    retry_after=BUSY_RETRY_AFTER,
                ) from None
            raise
        host = Host(host_id, worker, keeper, empty_since=time.monotonic())
        self._hosts[host_id] = host
        log.info("host started id=%s port=%d pid=%d ms=%.0f", host_id, worker.port, worker.pid,
                 (time.monotonic() - started) * 1000)  # fmt: skip
        return host

    # -- upkeep ----------------------------------------------------------------------------------

    def dead(self, worker: Worker) -> Host | None:
        """A host that died is dropped, its slot freed at once; no session is placed on it again.
        Told by its exit, or by a session that met it dead before its exit was handled."""
        host = self._hosts.get(worker.session_id)
        if host is None or host.worker is not worker:
            return None
        del self._hosts[host.id]
        self.admission.release(host.id)
        return host

    def worker_exited(self, worker: Worker, returncode: int) -> None:
        """The supervisor's exit listener (its sessions are told by the upkeep's)."""
        host = self.dead(worker)
        if host is not None and not worker.stopping:
            log.warning("host exited id=%s pid=%d code=%s sessions=%d", host.id, worker.pid, returncode,
                        len(host.sessions))  # fmt: skip

    async def run(self) -> None:
        """Ends hosts empty for ``idle_timeout``, and hosts that stopped answering (the whole
        host: each of its sessions resumes on its next call). Runs in the manager's task group."""
        self.supervisor.add_exit_listener(self.worker_exited)
        checked = time.monotonic()
        try:
            while True:
                await anyio.sleep(min(HOSTS_TICK, max(self.idle_timeout / 4, 0.05)))
                now = time.monotonic()
                try:
                    for host in self.all():
                        if host.empty_since is not None and now - host.empty_since >= self.idle_timeout:
                            await self._end_empty(host)
                    if now - checked >= self.health_interval:
                        checked = now
                        for host in self.all():
                            await self._check(host)
                except Exception:  # one host's failure must not end the others' upkeep
                    log.exception("hosts upkeep failed; going on")
        finally:
            self.supervisor.remove_exit_listener(self.worker_exited)

    async def _end_empty(self, host: Host) -> None:
        async with self._placing:  # not while a placement may be choosing it
            if host.sessions or self._hosts.get(host.id) is not host:
                return
            if len(self._hosts) == 1 and self.keep_last():
                return
            log.info("ending host id=%s (no session for %.0f s)", host.id, self.idle_timeout)
            await self._end(host)

    async def _check(self, host: Host) -> None:
        healthy = await probe(host.worker)
        host.health_failures = 0 if healthy else host.health_failures + 1
        if host.health_failures >= HEALTH_FAILURES and self._hosts.get(host.id) is host:
            log.warning("host failed %d health checks id=%s; ending it", HEALTH_FAILURES, host.id)
            await self.supervisor.stop(host.id)  # its exit crashes its sessions: each resumes

    async def _end(self, host: Host) -> None:
        """Listed until it is gone (a failure leaves it for the next tick); a placement does not
        choose it meanwhile: its worker is stopping."""
        with anyio.CancelScope(shield=True):
            try:
                await host.keeper.connection.aclose()
            except (RouterError, WorkerError, OSError) as exc:
                log.info("host connection close failed id=%s: %s", host.id, exc)
            await self.supervisor.forget(host.id)
        if self._hosts.get(host.id) is host:
            del self._hosts[host.id]
        self.admission.release(host.id)

    async def close(self) -> None:
        """Shutdown, after every session left: each host ended and its directory deleted."""
        async def end(host: Host) -> None:
            try:
                await self._end(host)
            except Exception:  # the others still end; the supervisor ends whatever is left
                log.exception("host not ended cleanly id=%s", host.id)

        async with anyio.create_task_group() as tg:
            for host in self.all():
                tg.start_soon(end, host)
