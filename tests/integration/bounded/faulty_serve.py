"""`mcp-router serve` with a fault injected, for the tests of failing loudly.

    python faulty_serve.py core serve ...       a task in the lifespan's task groups raises on SIGUSR1
    python faulty_serve.py recorder serve ...   the recorder's writer dies on its first batch
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from router.cli.main import main
from router.record.batches import BatchWriter
from router.sessions.manager import SessionManager

TRIGGER = signal.SIGUSR1


def inject_core_failure() -> None:
    original = SessionManager.run

    async def fail_when_triggered() -> None:
        with anyio.open_signal_receiver(TRIGGER) as signals:
            async for _ in signals:
                raise RuntimeError("injected core failure")

    @asynccontextmanager
    async def run(self: SessionManager) -> AsyncIterator[SessionManager]:
        async with original(self) as manager, anyio.create_task_group() as tg:
            tg.start_soon(fail_when_triggered)
            yield manager
            tg.cancel_scope.cancel()

    SessionManager.run = run  # type: ignore[method-assign]


def inject_writer_death() -> None:
    def broken(self: BatchWriter, *_: Any, **__: Any) -> list[int]:
        raise RuntimeError("injected writer failure")

    BatchWriter.write = broken  # type: ignore[method-assign]


if __name__ == "__main__":
    mode, *argv = sys.argv[1:]
    if mode == "core":
        inject_core_failure()
    else:
        inject_writer_death()
    sys.exit(main(argv))
