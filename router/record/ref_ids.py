"""The ref_id each client request gets: a UUID (version 4 in form) that stays unique across the
router's runs, since it keys the record's rows and kept files."""

from __future__ import annotations

import itertools
import uuid
from typing import Final

__all__ = ["RefIds"]

_TAIL_BITS: Final = 48  # the UUID's last group, 12 hex digits


class RefIds:
    """Hands out ids made of one random UUID's first four groups (74 random bits: unique per
    instance across runs) and a counter from a random start in its last group.

    ``uuid4()`` per request cost a getrandom() system call and two UUID constructions, a
    measurable share of a relayed call; this is one string format."""

    def __init__(self) -> None:
        base = uuid.uuid4()
        self._prefix = str(base)[: -_TAIL_BITS // 4]
        self._count = itertools.count(base.int & ((1 << _TAIL_BITS) - 1))

    def next(self) -> str:
        return f"{self._prefix}{next(self._count) & ((1 << _TAIL_BITS) - 1):012x}"
