"""The warm pool (--warm-workers) with the stand-in worker: take, refill, death, the cap, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from router.sessions.admission import Admission
from router.sessions.control import ControlError
from router.sessions.pool import KEEP_ALIVE_EVERY, WarmPool
from router.sessions.pooled import POKE_ARGS, POKE_TOOL, Pooled
from router.sessions.table import State
from tests.support import RawClient, RouterThread, router_settings, wait_for, whoami
from workers.orphans import processes_for
from workers.ports import PORT_SPAN, derive_port

PROBE_SLACK = 16  # ports busy in a row on a shared test machine, at most


def ready(router: RouterThread, count: int = 1) -> list[str]:
    """Waits until the pool holds ``count`` ready workers; their ids."""
    ids: list[str] = wait_for(lambda: (lambda r: r if len(r) >= count else None)(router.manager.pool.ready_ids()))
    return ids


def derived(port: int, worker_id: str) -> bool:
    """The port derived from the id, or one of the next few when that one was taken (probing)."""
    return (port - derive_port(worker_id)) % PORT_SPAN < PROBE_SLACK


def router_loop_call(router: RouterThread, coro: Any) -> Any:
    """Runs a coroutine on the router's event loop from the test thread."""
    loop = router.manager._loop
    assert loop is not None
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=30)


def test_the_first_call_takes_a_warm_worker_and_the_pool_refills(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir, warm_workers=1)) as router, RawClient(router.url) as c:
        [pooled] = ready(router)
        worker = router.manager.supervisor.get(pooled)
        assert worker is not None
        spawned_before = worker.pid
        assert processes_for(state_dir, pooled)

        c.initialize()
        # The handshake takes nothing: a session that never browses leaves the pool alone.
        assert c.session_id != pooled and router.manager.pool.ready_ids() == [pooled]
        me = whoami(c)  # the first call takes the warm worker, running since before initialize
        assert me["pid"] == spawned_before
        assert me["port"] == worker.port and derived(worker.port, pooled)
        session = router.manager.sessions.get(c.session_id)
        assert session is not None and session.state is State.LIVE

        # The pool refills in the background with a new id; the session keeps its worker.
        [refill] = wait_for(lambda: [i for i in router.manager.pool.ready_ids() if i != pooled])
        assert refill != pooled
        assert router.app.state.metrics.render().count(b"mcp_router_warm_workers 1.0") == 1
        assert c.delete().status_code == 200
        wait_for(lambda: not processes_for(state_dir, pooled), timeout=10)
        assert not (state_dir / "sessions" / pooled).exists()  # the taken worker's files went with it
        assert router.manager.supervisor.get(refill) is not None


def test_second_initialize_without_a_ready_worker_spawns_cold(state_dir: Path) -> None:
    settings = router_settings(state_dir, warm_workers=1)
    with RouterThread(settings) as router, RawClient(router.url) as a, RawClient(router.url) as b:
        [pooled] = ready(router)
        router.manager.pool.size = 0  # no refill: the next first call must spawn
        a.initialize()
        b.initialize()
        assert derived(whoami(a)["port"], pooled)
        assert b.session_id not in (None, pooled)
        assert derived(whoami(b)["port"], b.session_id or "")
        a.delete()
        b.delete()


def test_dead_warm_worker_is_replaced_not_handed_out(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir, warm_workers=1)) as router, RawClient(router.url) as c:
        [dead] = ready(router)
        worker = router.manager.supervisor.get(dead)
        assert worker is not None
        os.killpg(worker.pgid, signal.SIGKILL)
        wait_for(lambda: not processes_for(state_dir, dead), timeout=10)
        # The exit listener drops it (a death it has not handled yet is caught by take() itself:
        # test_take_skips_a_dead_worker).
        wait_for(lambda: dead not in router.manager.pool.ready_ids(), timeout=10)

        c.initialize()
        assert c.session_id != dead
        assert whoami(c)["pid"] != worker.pid
        # ...and the pool holds a live replacement again, never the dead one.
        replacement = wait_for(lambda: [i for i in router.manager.pool.ready_ids() if i not in (dead, c.session_id)])
        assert dead not in router.manager.pool.ready_ids()
        assert router.manager.supervisor.get(replacement[0]) is not None
        assert not (state_dir / "sessions" / dead).exists()  # its directory went with it
        c.delete()


def test_warm_workers_count_toward_the_cap_and_go_first(state_dir: Path) -> None:
    """Cap 2, pool 1: a session resuming while a session and a warm worker hold both slots takes
    the warm worker; the live session is not hibernated."""
    settings = router_settings(state_dir, warm_workers=1, max_live_workers=2, idle_timeout=600)
    with RouterThread(settings) as router, RawClient(router.url) as a, RawClient(router.url) as b:
        manager = router.manager
        ready(router)
        a.initialize()
        a.text("remember", key="k", value="a")  # takes the warm worker
        wait_for(lambda: len(manager.pool.ready_ids()) == 1)  # refilled: a + warm = the cap
        assert len(manager.admission) == 2
        b.initialize()
        b.start_worker()  # takes the warm worker; the pool cannot refill (cap reached)
        time.sleep(1.5)
        assert manager.pool.ready_ids() == []
        assert len(manager.admission) == 2

        session_a = manager.sessions.get(a.session_id)
        router_loop_call(router, manager.hibernate(session_a))
        [warm] = wait_for(lambda: manager.pool.ready_ids())  # a's slot went to a new warm worker
        assert len(manager.admission) == 2

        warm_pid = manager.supervisor.get(warm).pid
        assert whoami(a)["pid"] == warm_pid  # a resumes on the warm worker
        assert manager.sessions.get(a.session_id).state is State.LIVE
        assert manager.sessions.get(b.session_id).state is State.LIVE  # b was not hibernated
        assert warm not in manager.pool.ready_ids()
        assert len(manager.admission) == 2
        a.delete()
        b.delete()


def test_shutdown_ends_warm_workers_and_deletes_their_files(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir, warm_workers=2)) as router:
        pooled = ready(router, 2)
        assert all(processes_for(state_dir, i) for i in pooled)
    assert not processes_for(state_dir)
    for session_id in pooled:
        assert not (state_dir / "sessions" / session_id).exists()
        assert not (state_dir / "workers" / f"{session_id}.json").exists()


def test_warm_workers_are_not_reaped_as_idle_sessions(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir, warm_workers=1, idle_timeout=0.3)) as router:
        [pooled] = ready(router)
        pid = router.manager.supervisor.get(pooled).pid
        time.sleep(1.5)
        assert router.manager.pool.ready_ids() == [pooled]
        assert router.manager.supervisor.get(pooled).pid == pid


async def test_take_skips_a_dead_worker() -> None:
    """Checked at take time too, for a death the exit listener has not handled yet."""
    supervisor: Any = SimpleNamespace()
    admission = Admission(supervisor, max_live_workers=4)
    assert admission.try_admit("dead") and admission.try_admit("live")
    pool = WarmPool(admission=admission, supervisor=supervisor, size=2, start_soon=lambda job: None)

    def entry(session_id: str, alive: bool) -> Pooled:
        worker: Any = SimpleNamespace(alive=lambda: alive, stopping=False, port=1, pid=1)
        e = Pooled(session_id, worker=worker, ready=True)
        pool._entries[session_id] = e
        return e

    entry("dead", False)
    live = entry("live", True)
    assert pool.take() is live
    assert "dead" not in admission and "live" in admission  # the dead one's slot was freed at once
    assert pool.take() is None


class _Control:
    """A pooled worker's control session that records its calls; ``hold`` keeps a call waiting
    (a poke on its way), ``refuse`` makes the worker refuse."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any] | None]] = []
        self.hold: asyncio.Event | None = None
        self.refuse = False

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> str:
        self.calls.append((tool, arguments))
        if self.hold is not None:
            await self.hold.wait()
        if self.refuse:
            raise ControlError("worker gone")
        return ""


def _keep_warm_pool(ids: list[str], every: float = 30.0) -> tuple[WarmPool, dict[str, _Control]]:
    forgotten: list[str] = []

    async def forget(session_id: str) -> None:
        forgotten.append(session_id)

    supervisor: Any = SimpleNamespace(forget=forget)
    admission = Admission(supervisor, max_live_workers=len(ids))
    pool = WarmPool(
        admission=admission, supervisor=supervisor, size=len(ids), start_soon=lambda job: None, keep_warm_every=every
    )
    controls = {}
    for session_id in ids:
        assert admission.try_admit(session_id)
        worker: Any = SimpleNamespace(alive=lambda: True, stopping=False, port=1, pid=1)
        controls[session_id] = control = _Control()
        entry = Pooled(session_id, worker=worker, control=cast(Any, control), browser=True, ready=True)
        entry.warmed_at = time.monotonic()
        pool._entries[session_id] = entry
    return pool, controls


async def test_a_waiting_worker_is_poked_with_a_snapshot_once_its_interval_is_up() -> None:
    pool, controls = _keep_warm_pool(["a"], every=0.2)
    await pool.keep_warm()
    assert controls["a"].calls == []  # warmed just now
    await asyncio.sleep(0.25)
    await pool.keep_warm()
    await pool.keep_warm()  # the interval starts again at each poke
    assert controls["a"].calls == [(POKE_TOOL, POKE_ARGS)]
    assert pool.pokes == 1
    await asyncio.sleep(0.25)
    controls["a"].refuse = True
    await pool.keep_warm()  # a worker that stopped answering is ended, not handed out
    assert pool.ready_ids() == [] and pool.take() is None and pool.pokes == 1


async def test_off_keeps_only_the_browsers_keep_alive() -> None:
    pool, _ = _keep_warm_pool(["a"], every=0)
    assert pool.poke_every == KEEP_ALIVE_EVERY  # @playwright/mcp closes a browser idle for an hour
    pool, _ = _keep_warm_pool(["a"], every=KEEP_ALIVE_EVERY * 2)
    assert pool.poke_every == KEEP_ALIVE_EVERY


async def test_take_prefers_a_worker_not_being_poked_and_hands_one_out_if_it_is_the_last() -> None:
    pool, controls = _keep_warm_pool(["first", "second"], every=0.01)
    hold = controls["first"].hold = asyncio.Event()
    await asyncio.sleep(0.02)
    poking = asyncio.create_task(pool.keep_warm())
    await asyncio.sleep(0.01)  # "first" is being poked, "second" waits its turn
    assert controls["first"].calls and not controls["second"].calls
    taken = pool.take()
    assert taken is not None and taken.id == "second"
    last = pool.take()  # its poke is read only: better than a cold spawn
    assert last is not None and last.id == "first" and last.poking
    hold.set()
    await poking
    assert not last.poking and pool.pokes == 1


def test_the_next_client_gets_the_session_the_pool_opened_in_its_shape(state_dir: Path) -> None:
    """Ready workers carry an MCP session opened with the last client's initialize params; a
    client with the same params is handed it (no handshake replayed at its first call), one with
    other params gets its own handshake replayed, and the prepared session is not used."""
    with RouterThread(router_settings(state_dir, warm_workers=1)) as router:
        pool = router.manager.pool
        with RawClient(router.url) as first:
            first.initialize()  # teaches the pool this client's shape
            shape = router.manager.sessions.get(first.session_id).initialize_params
            prepared = wait_for(lambda: pool.prepared_sessions(shape), timeout=20)

            with RawClient(router.url) as same:
                same.initialize()
                assert whoami(same)["pid"] > 0
                session = router.manager.sessions.get(same.session_id)
                assert session is not None and session.worker_session_id in prepared
                same.delete()

            prepared = wait_for(lambda: pool.prepared_sessions(shape), timeout=20)
            with RawClient(router.url) as other:
                other.initialize(name="another-client")
                assert whoami(other)["pid"] > 0  # its own handshake, replayed on the warm worker
                session = router.manager.sessions.get(other.session_id)
                assert session is not None and session.state is State.LIVE
                assert session.worker_session_id and session.worker_session_id not in prepared
                other.delete()
            first.delete()
