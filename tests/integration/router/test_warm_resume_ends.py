"""A warm worker a resume took from the reserve and did not keep is ended: no process left running,
no slot under ``max_live_workers`` held, its directory gone. It is not kept when the session ends
while the worker is being brought back for it, when the resume is cancelled (the request gone),
or when the worker refuses it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import pytest

from router.errors import WorkerUnreachable
from router.sessions.control import ControlError, ControlSession
from router.sessions.table import ENDED, Session, State
from tests.integration.router.test_resume_reserve import RESERVE_FILLED, clients_of, put_to_sleep
from tests.integration.router.test_warm_pool import router_loop_call
from tests.support import RawClient, RouterThread, async_wait_for, router_settings, wait_for
from workers.orphans import processes_for

WORKER_GONE: Final = 15.0  # a stand-in worker's group ended and its exit handled, on a loaded machine


@contextmanager
def one_asleep_with_a_warm_worker(state_dir: Path) -> Iterator[tuple[RouterThread, RawClient, str]]:
    """A router whose one session browsed and sleeps, and the reserve's warm worker for it (its id)."""
    with (
        RouterThread(router_settings(state_dir, resume_reserve=1, idle_timeout=600)) as router,
        clients_of(router, 1) as [client],
    ):
        put_to_sleep(router, [client])
        [warm] = wait_for(router.manager.pool.ready_ids, timeout=RESERVE_FILLED)
        yield router, client, warm


def assert_ended(router: RouterThread, state_dir: Path, warm: str) -> None:
    wait_for(lambda: not processes_for(state_dir, warm), timeout=WORKER_GONE)
    assert warm not in router.manager.admission, "the warm worker's slot is still held"
    assert not (state_dir / "sessions" / warm).exists(), "the warm worker's directory is left"
    assert router.manager.supervisor.get(warm) is None


def test_a_session_ended_during_its_warm_resume_leaves_no_worker(state_dir: Path, monkeypatch: Any) -> None:
    """DELETE (or --end) while a warm worker's browser is being restored for the session: the
    session ends, and so does the worker it took, instead of running on for nobody."""
    routers: list[RouterThread] = []

    async def restore(session_dir: Path, *_: Any, **__: Any) -> bool:
        manager = routers[0].manager
        session = manager.sessions.get(session_dir.name)
        assert session is not None
        manager.upkeep.start_soon(partial(manager.end, session, State.CLOSED))
        await async_wait_for(lambda: session.state in ENDED)  # ended before any await of end's
        return True

    monkeypatch.setattr("router.sessions.continuity.restore_browser", restore)
    with one_asleep_with_a_warm_worker(state_dir) as (router, client, warm):
        routers.append(router)
        client.post({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}})
        assert router.manager.sessions.get(client.session_id or "") is None
        assert_ended(router, state_dir, warm)


class RefusingControl(ControlSession):
    """A control session the worker will not open."""

    async def open(self, initialize_params: dict[str, Any] | None = None) -> str:
        raise ControlError("worker answered 500")


async def cancelled_during_the_restore(router: RouterThread, session: Session) -> None:
    """The resume's request goes away while its restore onto the warm worker is queued or runs."""
    started = anyio.Event()

    async def restore(*_: Any, **__: Any) -> bool:
        started.set()
        await anyio.Event().wait()  # a browser that never answers
        return True

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("router.sessions.continuity.restore_browser", restore)
        warm = router.manager.pool.take()
        assert warm is not None
        async with anyio.create_task_group() as tg:

            async def resume() -> None:
                async with session.lock:
                    await router.manager.continuity.attach(
                        session, worker=warm.worker, control=warm.control, connection=warm.connection,
                        prepared=warm.client, prepared_stream=warm.stream, reason="hibernated",
                    )  # fmt: skip

            tg.start_soon(resume)
            await started.wait()
            tg.cancel_scope.cancel()


async def refused(router: RouterThread, session: Session) -> None:
    """The warm worker refuses the resume's control session: the resume fails."""
    warm = router.manager.pool.take()
    assert warm is not None and warm.connection is not None
    with pytest.raises(WorkerUnreachable):
        async with session.lock:
            await router.manager.continuity.attach(
                session, worker=warm.worker, control=RefusingControl(warm.connection), connection=warm.connection,
                prepared=warm.client, prepared_stream=warm.stream, reason="hibernated",
            )  # fmt: skip


@pytest.mark.parametrize("resume", [cancelled_during_the_restore, refused], ids=["cancelled", "refused"])
def test_a_warm_resume_that_does_not_finish_ends_its_worker(
    state_dir: Path, resume: Callable[[RouterThread, Session], Awaitable[None]]
) -> None:
    with one_asleep_with_a_warm_worker(state_dir) as (router, client, warm):
        session = router.manager.sessions.get(client.session_id or "")
        assert session is not None
        router_loop_call(router, resume(router, session))
        assert session.connection is None
        assert_ended(router, state_dir, warm)
        assert "pid=" in client.text("whoami"), "the session itself resumes on its next call"
