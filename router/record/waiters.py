"""Who waits on the record's writer: ``committed`` callers (on item sequence numbers) and
``flush`` callers (also on the linked files being read). Loop-side only."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class _RowWaiter:
    """Waits for the items with ``start < seq <= target``; ``lost`` once one of them is."""

    start: int
    target: int
    future: asyncio.Future[bool]
    lost: bool = False


class Waiters:
    def __init__(self) -> None:
        self._rows: list[_RowWaiter] = []
        self._linked: list[tuple[int, asyncio.Future[None]]] = []

    def rows(self, start: int, target: int) -> asyncio.Future[bool]:
        """Resolves True when the items up to ``target`` are committed, False if one was lost."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._rows.append(_RowWaiter(start, target, future))
        return future

    def linked(self, target: int) -> asyncio.Future[None]:
        """Resolves when ``target`` enrichment jobs are done."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._linked.append((target, future))
        return future

    def rows_done(self, done: int, lost: Sequence[int]) -> None:
        """After a batch: mark the waiters whose range holds a lost item, resolve the finished."""
        if lost:
            for waiter in self._rows:
                if not waiter.lost:
                    waiter.lost = any(waiter.start < seq <= waiter.target for seq in lost)
        keep = []
        for waiter in self._rows:
            if done >= waiter.target:
                if not waiter.future.done():
                    waiter.future.set_result(not waiter.lost)
            else:
                keep.append(waiter)
        self._rows = keep

    def linked_done(self, done: int) -> None:
        keep = []
        for target, future in self._linked:
            if done >= target:
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((target, future))
        self._linked = keep

    def release_all(self, done: int) -> None:
        """The writer stopped: nobody may wait forever. Rows not reached count as lost."""
        for waiter in self._rows:
            if not waiter.future.done():
                waiter.future.set_result(not waiter.lost and done >= waiter.target)
        for _, future in self._linked:
            if not future.done():
                future.set_result(None)
        self._rows, self._linked = [], []
