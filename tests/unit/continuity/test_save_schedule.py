"""When the browser state is saved after calls: once per burst, never twice in a row for calls
that ended during a save, and never sooner than SAVE_MIN_INTERVAL after the last save."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from router.sessions import upkeep as upkeep_mod
from router.sessions.table import Session


class Saves:
    """A state saver that takes 0.3 s (two tool calls on a busy worker) and says when it ran."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.first_started = anyio.Event()
        self.first_done = anyio.Event()
        self.second_started = anyio.Event()

    async def save(self, session: Session, connection: object, control: object) -> None:
        self.started.append(time.monotonic())
        (self.second_started if self.first_started.is_set() else self.first_started).set()
        await anyio.sleep(0.3)
        self.first_done.set()


def upkeep_with(saves: Saves) -> upkeep_mod.Upkeep:
    stub: Any = SimpleNamespace(state_saver=saves)
    return upkeep_mod.Upkeep(
        sessions=stub, continuity=stub, supervisor=stub, layout=stub,
        recorder=None, metrics=None, idle_timeout=60, retention=60, health_interval=60, end=stub,
        owns_directory=stub,
    )


async def test_calls_ending_during_a_save_get_one_save_after_the_min_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(upkeep_mod, "SAVE_DEBOUNCE", 0.05)
    monkeypatch.setattr(upkeep_mod, "SAVE_MIN_INTERVAL", 1.0)
    saves = Saves()
    up = upkeep_with(saves)
    session = Session("s")
    session.connection = object()  # type: ignore[assignment]
    async with anyio.create_task_group() as tg:
        up._tg = tg  # the upkeep's task group, without its reaping and health loops
        up.schedule_save(session)  # call 1 ends
        await saves.first_started.wait()
        up.schedule_save(session)  # call 2 ends during that save: one more after it
        await saves.first_done.wait()
        up.schedule_save(session)  # call 3 ends after it: shares call 2's save
        with anyio.fail_after(10):
            await saves.second_started.wait()
        await anyio.sleep(1.5)  # a third save, if any, would have started by now
        tg.cancel_scope.cancel()
    assert len(saves.started) == 2, f"{len(saves.started)} saves: calls 2 and 3 should share one"
    assert saves.started[1] - saves.started[0] >= 1.0, "the second save came before SAVE_MIN_INTERVAL"
