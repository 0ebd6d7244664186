"""uvicorn's server, waking once a second instead of ten times.

uvicorn's main loop wakes every 0.1 s to see whether it should stop, and renews its ``Date``
header on every tenth wake-up. On a VM, where a wake-up costs the most, those ten wake-ups a
second were most of what the idle router spent (about 3 of 4 ms of CPU a second with 20
sessions; a bare uvicorn spent 3 ms a second ticking, 1 ms ticking once a second). Here the loop
waits a second, or until a stop is asked for: setting ``should_exit`` (uvicorn's signal handler,
the health watchdog, a test's teardown; from any thread) wakes it at once. The ``Date`` header is
renewed on every tick, once a second as before."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from functools import partial
from typing import Final

import uvicorn

__all__ = ["TICK_S", "RouterServer"]

TICK_S: Final = 1.0
_TENTHS_PER_TICK: Final = 10  # uvicorn's on_tick counts tenths of a second
_COUNTER_WRAP: Final = 864000  # as uvicorn wraps it: a day of tenths


class RouterServer(uvicorn.Server):
    tick_s: float = TICK_S

    def __init__(self, config: uvicorn.Config) -> None:
        self._stop_asked = False
        self._wake: Callable[[], object] | None = None  # set while the main loop runs
        super().__init__(config)

    @property  # uvicorn's is a plain attribute: this one also wakes the loop
    def should_exit(self) -> bool:
        return self._stop_asked

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._stop_asked = value
        wake = self._wake
        if value and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to wake
                wake()

    async def main_loop(self) -> None:
        woken = asyncio.Event()
        self._wake = partial(asyncio.get_running_loop().call_soon_threadsafe, woken.set)
        try:
            counter = 0
            while not await self.on_tick(counter):
                counter = (counter + _TENTHS_PER_TICK) % _COUNTER_WRAP
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), self.tick_s)
        finally:
            self._wake = None
