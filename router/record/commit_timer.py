"""When the record commits what nobody is waiting for: one timer, the earliest deadline wins.

Whoever needs rows on disk now flushes (``Recorder.flush``), which commits at once. Everything
else is committed a little later, so that rows close together share one commit; the delays
below say how much later."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

__all__ = ["SETTLE_DELAY_S", "WRITE_DELAY_S", "CommitTimer"]

# A quiet writer waits this long after the first item, so that a call's request and answer go in
# the one commit its answer makes, a click's (~0.55 s) too; at 20 ms such a call's request went
# alone through a hop to the thread (~0.6 ms of CPU). It bounds what a killed router loses: the
# requests of its last second, none answered (a call that hangs is on disk after a second).
WRITE_DELAY_S: Final = 1.0
# The commit after an answer (its rows are in the write-ahead file) waits this long for the next
# answers, so that calls close together share one commit: a commit's fixed cost (~0.1 ms of CPU:
# the WAL's frames and locks, the write-ahead file cut back) is paid once for them. It bounds how
# late a reader going around the router (sqlite3 on the file) sees an answered call; the router's
# own readers flush first.
SETTLE_DELAY_S: Final = 0.1


class CommitTimer:
    """Calls ``fire`` once the earliest deadline asked for (``within``) has come; loop-side only."""

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None

    def within(self, delay: float) -> None:
        """``fire`` ``delay`` s from now at the latest: an earlier deadline already set stays."""
        loop = asyncio.get_running_loop()
        handle = self._handle
        if handle is not None:
            if handle.when() <= loop.time() + delay:
                return
            handle.cancel()
        self._handle = loop.call_later(delay, self._run)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _run(self) -> None:
        self._handle = None
        self._fire()
