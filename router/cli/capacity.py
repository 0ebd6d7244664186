"""How many browser sessions fit in the memory available, with a browser each or sharing browsers
(``--sessions-per-browser``): the arithmetic behind ``mcp-router doctor``'s memory line.

The figures were measured with scripts/isolated_memory.py (PSS of a worker's whole process tree:
node, the headless shell and its helpers; a small local page). A worker per session: 340 MiB for
one session, 160–171 MiB for each added one: PSS splits node's and the browser's code pages among
every process that maps them, so only the machine's first browser carries them whole. One
``@playwright/mcp --isolated`` worker: 339 / 399 / 470 MiB for 1 / 4 / 8 sessions, 19–24 MiB for
each added context. So a shared worker (a host) costs what a worker does, plus a context for each
further session on it; a second host is counted like an added worker (the same process tree),
not like the first (not measured as such). Real pages add their own weight (~50–100 MiB per busy
one is commonly reported), so these are ceilings for light browsing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MIB: Final = 1024 * 1024
FIRST_BROWSER_BYTES: Final = 340 * MIB  # the machine's first worker: node, its browser, one session
ADDED_BROWSER_BYTES: Final = 170 * MIB  # each further worker with its own browser and one session
ADDED_CONTEXT_BYTES: Final = 25 * MIB  # each further session sharing a worker's browser (its context)
# Code pages every worker maps: paid once, by the first.
SHARED_CODE_BYTES: Final = FIRST_BROWSER_BYTES - ADDED_BROWSER_BYTES
# What sharing is shown with while it is off: the most sessions per browser measured.
COMPARED_SESSIONS_PER_BROWSER: Final = 8


def host_bytes(sessions: int) -> int:
    """One worker carrying ``sessions`` (≥ 1) client sessions, beyond the code pages all share."""
    return ADDED_BROWSER_BYTES + ADDED_CONTEXT_BYTES * (sessions - 1)


def sessions_that_fit(available: int, per_browser: int) -> int:
    """Sessions that fit in ``available`` bytes with ``--sessions-per-browser per_browser`` (1: a
    worker and a browser each): as many full workers as fit, then a part-filled one in the rest."""
    per_browser = max(1, per_browser)
    if available < FIRST_BROWSER_BYTES:
        return 0
    full, left = divmod(available - SHARED_CODE_BYTES, host_bytes(per_browser))
    on_last = 0 if left < ADDED_BROWSER_BYTES else 1 + (left - ADDED_BROWSER_BYTES) // ADDED_CONTEXT_BYTES
    return full * per_browser + on_last


@dataclass(frozen=True)
class Capacity:
    """Live sessions under the settings, against what the memory available holds.

    ``available``: bytes free now (None where unknown); a running router's sessions already hold
    part of the machine, so what fits is room for that many *more*."""

    available: int | None
    per_browser: int
    max_live_workers: int

    @property
    def cap(self) -> int:
        """The router's own limit: live workers, each carrying up to ``per_browser`` sessions."""
        return self.max_live_workers * max(1, self.per_browser)

    @property
    def fit(self) -> int | None:
        """Sessions the memory available holds as set; None where it is unknown."""
        return None if self.available is None else sessions_that_fit(self.available, self.per_browser)

    @property
    def a_browser_each(self) -> int | None:
        return None if self.available is None else sessions_that_fit(self.available, 1)

    @property
    def compared_per_browser(self) -> int:
        """Sessions per browser the sharing figure is given for: the setting's, else the measured."""
        return self.per_browser if self.per_browser > 1 else COMPARED_SESSIONS_PER_BROWSER

    @property
    def sharing(self) -> int | None:
        return None if self.available is None else sessions_that_fit(self.available, self.compared_per_browser)

    @property
    def over_memory(self) -> bool:
        """Whether the cap lets more sessions live than the memory available holds."""
        fit = self.fit
        return fit is not None and self.cap > fit

    @property
    def workers_that_fit(self) -> int:
        """The largest --max-live-workers whose cap stays within memory (at least one)."""
        return max(1, (self.fit or 0) // max(1, self.per_browser))
