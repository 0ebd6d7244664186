"""The resume reserve with the stand-in worker: it grows with the sessions that went to sleep, up to
``resume_reserve`` and only while memory is spare (its first worker too); sessions resuming
together take its workers. By default it is one worker, shown as the reserve and as no session's;
at 0 nothing of a worker runs once every session sleeps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from router.sessions.pool import REFILL_DELAY
from router.sessions.resume_notice import NOTICE_PREFIX, PARTIAL_NOTICE_PREFIX
from router.sessions.table import State
from router.settings import Settings
from tests.integration.router.test_warm_pool import router_loop_call
from tests.support import (
    RawClient,
    RouterThread,
    async_wait_for,
    auth_headers,
    router_settings,
    wait_for,
    whoami,
)
from workers.orphans import processes_for, running_workers

SETTLE = 1.5  # the pool looks again at least once a second: long enough to see it did not grow
RESERVE_FILLED = 30.0  # one stand-in worker at a time, on a loaded machine
SHORT_RESTORE_BUDGET = 0.5  # the budget a stuck restore gets here (seconds), made short
DEFAULT_RESERVE = Settings.model_fields["resume_reserve"].default
REAP_IDLE = 0.5  # seconds: the idle timeout the abandoned sessions are reaped under
REAPED_WITHIN = 15.0


@contextmanager
def clients_of(router: RouterThread, count: int) -> Iterator[list[RawClient]]:
    """``count`` clients of the router, their sessions ended (DELETE) once done."""
    clients = [RawClient(router.url) for _ in range(count)]
    try:
        yield clients
    finally:
        for client in clients:
            client.delete()
            client.close()


def put_to_sleep(router: RouterThread, clients: list[RawClient]) -> list[int]:
    """Each client's session browsed (as far as the reserve knows) and hibernated; their pids."""
    pids = []
    for client in clients:
        client.initialize()
        pids.append(whoami(client)["pid"])
        session = router.manager.sessions.get(client.session_id)
        session.browser_used = True  # the stand-in has no browser_ tools to set it
        router_loop_call(router, router.manager.hibernate(session))
    return pids


def abandon(router: RouterThread, clients: list[RawClient]) -> list[int]:
    """Each client browses, then goes quiet without a DELETE (as Claude Code leaves) until the
    router has reaped its worker; their pids."""
    pids = []
    for client in clients:
        client.initialize()
        client.text("browser_navigate", url="https://example.test/")
        pids.append(whoami(client)["pid"])
    manager = router.manager
    manager.upkeep.idle_timeout = REAP_IDLE
    sessions = [manager.sessions.get(c.session_id) for c in clients]
    wait_for(lambda: all(s.state is State.REAPED for s in sessions), timeout=REAPED_WITHIN)
    manager.upkeep.idle_timeout = 600  # a resume's worker is not reaped again under the test
    return pids


def health(router: RouterThread) -> dict[str, Any]:
    answer = httpx.get(f"{router.base_url}/healthz", headers=auth_headers(), timeout=10, trust_env=False)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


@pytest.mark.parametrize(("reserve", "left"), [(DEFAULT_RESERVE, 1), (0, 0)], ids=["default", "none"])
def test_three_abandoned_sessions_leave_at_most_one_worker_after_their_reap(
    state_dir: Path, reserve: int, left: int
) -> None:
    """Three conversations browse and go without a DELETE; once they are reaped, the router holds
    one warm worker by default (shown as the reserve, serving no session) and none at all with
    ``--resume-reserve 0``. A resume still works: it takes the reserve's worker, or spawns."""
    state = state_dir
    with RouterThread(router_settings(state, resume_reserve=reserve, idle_timeout=600)) as router:
        manager = router.manager
        with clients_of(router, 3) as clients:
            old_pids = abandon(router, clients)
            wait_for(lambda: len(manager.pool.ready_ids()) == left and manager.supervisor.live_count == left,
                     timeout=RESERVE_FILLED)  # fmt: skip
            time.sleep(SETTLE)
            warm = manager.pool.ready_ids()
            assert len(warm) == left and manager.supervisor.live_count == left  # three asleep
            running = set(processes_for(state))
            assert running == {pid for w in warm for pid in processes_for(state, w)}  # nothing but the reserve
            assert bool(running) == bool(left) and running_workers(state) == set(warm)
            body = health(router)
            assert (body["reserve"], body["warm_workers"], body["workers"], body["session_workers"]) == (
                left, left, left, 0,
            )  # fmt: skip
            assert body["reserve_max"] == reserve and body["sessions"] == 3
            api = httpx.get(f"{router.base_url}/api/sessions", headers=auth_headers(), timeout=10, trust_env=False)
            view = api.json()
            assert view["reserve"] == {"workers": left, "max": reserve}
            assert sorted(row["id"] for row in view["sessions"]) == sorted(c.session_id for c in clients)
            assert not any(row["worker_pid"] for row in view["sessions"])  # the reserve is no session's

            warm_pids = {manager.supervisor.get(w).pid for w in warm}
            pid = whoami(clients[0])["pid"]
            assert pid not in old_pids
            assert (pid in warm_pids) == bool(left)  # taken from the reserve, or spawned
            assert manager.sessions.get(clients[0].session_id).state is State.LIVE


def test_the_reserve_grows_with_sleeping_sessions_up_to_its_cap(state_dir: Path) -> None:
    settings = router_settings(state_dir, resume_reserve=2, idle_timeout=600)
    with RouterThread(settings) as router, clients_of(router, 3) as clients:
        old_pids = put_to_sleep(router, clients)
        warm = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(router.manager.pool.ready_ids()),
                        timeout=RESERVE_FILLED)  # fmt: skip
        time.sleep(SETTLE)
        assert sorted(router.manager.pool.ready_ids()) == sorted(warm)  # three asleep, cap two
        warm_pids = {router.manager.supervisor.get(w).pid for w in warm}

        with ThreadPoolExecutor(len(clients)) as resumes:  # all three come back at once
            pids = list(resumes.map(lambda c: whoami(c)["pid"], clients))
        assert len(set(pids)) == 3 and not set(pids) & set(old_pids)
        assert warm_pids <= set(pids)  # two took the reserve, one spawned in its turn
        for client in clients:
            assert router.manager.sessions.get(client.session_id).state is State.LIVE


@pytest.mark.parametrize("warm_workers", [0, 1])
def test_without_spare_memory_the_reserve_holds_no_worker(state_dir: Path, monkeypatch: Any, warm_workers: int) -> None:
    """Not even its first: only the ``--warm-workers`` ones, which are asked for outright, come up."""
    monkeypatch.setattr("router.sessions.manager.room_for_another_warm_worker", lambda: False)
    settings = router_settings(state_dir, resume_reserve=2, warm_workers=warm_workers, idle_timeout=600)
    with RouterThread(settings) as router, clients_of(router, 2) as clients:
        abandon(router, clients)
        pool = router.manager.pool
        wait_for(lambda: len(pool.ready_ids()) == warm_workers, timeout=RESERVE_FILLED)
        time.sleep(SETTLE + REFILL_DELAY)  # a first call took a --warm-workers one: the refill waits
        assert len(pool.ready_ids()) == warm_workers and router.manager.supervisor.live_count == warm_workers
        assert health(router)["reserve"] == 0


def test_when_memory_runs_short_the_reserve_gives_back_every_worker(state_dir: Path, monkeypatch: Any) -> None:
    short = [False]
    monkeypatch.setattr("router.sessions.manager.memory_below_floor", lambda: short[0])
    monkeypatch.setattr("router.sessions.manager.room_for_another_warm_worker", lambda: not short[0])
    settings = router_settings(state_dir, resume_reserve=3, idle_timeout=600)
    with RouterThread(settings) as router, clients_of(router, 3) as clients:
        put_to_sleep(router, clients)
        pool = router.manager.pool
        wait_for(lambda: len(pool.ready_ids()) == 3, timeout=RESERVE_FILLED)
        short[0] = True  # browsing sessions grew: the reserve's workers go, its first too
        wait_for(lambda: not pool.ready_ids() and router.manager.supervisor.live_count == 0,
                 timeout=RESERVE_FILLED)  # fmt: skip
        time.sleep(SETTLE)
        assert not pool.ready_ids()  # and it does not refill while memory stays short
        assert not processes_for(state_dir)


@pytest.mark.parametrize("bring_ups", [1, 3])
def test_bring_ups_setting_reaches_the_queue(state_dir: Path, bring_ups: int) -> None:
    with RouterThread(router_settings(state_dir, bring_ups=bring_ups)) as router:
        assert router.manager.bring_ups.limit == bring_ups


def test_restores_onto_warm_workers_queue_and_each_counts_as_a_save(state_dir: Path, monkeypatch: Any) -> None:
    """Three sessions resuming at once on three warm workers with one bring-up slot: their
    restores run one at a time (ten together on two cores otherwise all end late), and what a
    restore put back counts as saved, so the save after the resumed call waits its interval."""
    routers: list[RouterThread] = []
    started: list[bool] = []  # each restore's fresh_profile: onto a warm worker's fresh profile
    running: list[int] = [0]
    most: list[int] = [0]

    async def restore(*_: Any, fresh_profile: bool, **__: Any) -> bool:
        started.append(fresh_profile)
        running[0] += 1
        most[0] = max(most[0], running[0])
        try:
            # Each ends only once all three have come: the others queued for the slot, or, if
            # restores did not queue, running beside it.
            queue = routers[0].manager.continuity.warm_restores
            await async_wait_for(lambda: len(started) + queue.waiting == 3)
        finally:
            running[0] -= 1
        return True

    monkeypatch.setattr("router.sessions.continuity.restore_browser", restore)
    settings = router_settings(state_dir, resume_reserve=3, bring_ups=1, idle_timeout=600)
    with RouterThread(settings) as router:
        routers.append(router)
        with clients_of(router, 3) as clients:
            put_to_sleep(router, clients)
            warm = wait_for(lambda: (lambda r: r if len(r) == 3 else None)(router.manager.pool.ready_ids()),
                            timeout=3 * RESERVE_FILLED)  # fmt: skip
            warm_pids = {router.manager.supervisor.get(w).pid for w in warm}
            resumed_after = time.monotonic()
            with ThreadPoolExecutor(len(clients)) as resumes:
                answers = list(resumes.map(lambda c: c.text("whoami"), clients))
            assert all(NOTICE_PREFIX in text for text in answers), answers  # each was a restore
            assert started == [True, True, True], "a restore was not onto a warm worker"
            assert {whoami(c)["pid"] for c in clients} == warm_pids
            assert most[0] == 1
            for client in clients:
                session = router.manager.sessions.get(client.session_id)
                assert session.state_saved_at > resumed_after


@pytest.mark.parametrize(("reserve", "fresh"), [(0, False), (1, True)], ids=["cold", "warm"])
def test_only_a_warm_workers_profile_counts_as_fresh(
    state_dir: Path, monkeypatch: Any, reserve: int, fresh: bool
) -> None:
    """A resume onto a warm worker restores into a browser started on an empty profile; a spawn
    of the session's own runs on the profile the session left, which the restore must clear."""
    profiles: list[bool] = []

    async def restore(*_: Any, fresh_profile: bool, **__: Any) -> bool:
        profiles.append(fresh_profile)
        return True

    monkeypatch.setattr("router.sessions.continuity.restore_browser", restore)
    settings = router_settings(state_dir, resume_reserve=reserve, idle_timeout=600)
    with RouterThread(settings) as router, clients_of(router, 1) as [client]:
        put_to_sleep(router, [client])
        if reserve:
            wait_for(router.manager.pool.ready_ids, timeout=RESERVE_FILLED)
        assert NOTICE_PREFIX in client.text("whoami")
        assert profiles == [fresh]


def test_a_stuck_restore_gives_the_queue_up_after_its_budget(state_dir: Path, monkeypatch: Any) -> None:
    """Two sessions resume at once onto warm workers with one bring-up slot, and the first
    restore never ends (pages that never load): it is given up after its budget, its session
    carries on without a claim that its state is back, and the other's restore gets the slot."""
    stuck: list[str] = []

    async def restore(session_dir: Path, *_: Any, **__: Any) -> bool:
        if not stuck:
            stuck.append(session_dir.name)
            await anyio.Event().wait()  # a browser that never answers
        return True

    monkeypatch.setattr("router.sessions.continuity.restore_browser", restore)
    monkeypatch.setattr("router.sessions.continuity.RESTORE_BUDGET", SHORT_RESTORE_BUDGET)
    settings = router_settings(state_dir, resume_reserve=2, bring_ups=1, idle_timeout=600)
    with RouterThread(settings) as router, clients_of(router, 2) as clients:
        put_to_sleep(router, clients)
        wait_for(lambda: len(router.manager.pool.ready_ids()) == 2, timeout=2 * RESERVE_FILLED)
        with ThreadPoolExecutor(len(clients)) as resumes:
            texts = list(resumes.map(lambda c: c.text("whoami"), clients))
        answers = {c.session_id: text for c, text in zip(clients, texts, strict=True)}
        [cut] = stuck
        [other] = [sid for sid in answers if sid != cut]
        assert NOTICE_PREFIX not in answers[cut] and NOTICE_PREFIX in answers[other], answers
        # The client whose restore was cut short is told not to trust its old refs.
        assert PARTIAL_NOTICE_PREFIX in answers[cut] and PARTIAL_NOTICE_PREFIX not in answers[other], answers
        assert router.manager.continuity.warm_restores.running == 0
        for client in clients:
            assert router.manager.sessions.get(client.session_id).state is State.LIVE
