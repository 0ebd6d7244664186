"""A snapshot of what the session manager's parts hold, for /healthz and /metrics: they read it,
never the parts themselves."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.sessions.manager import SessionManager


@dataclass(frozen=True, slots=True)
class ManagerStats:
    sessions: int  # known to this run and not ended (a previous run's are loaded on first use)
    by_state: dict[str, int] = field(default_factory=dict)
    live_workers: int = 0  # worker processes alive
    slots: int = 0  # worker slots held or being filled: equal to live_workers once settled
    warm_workers: int = 0  # ready in the pool (--warm-workers, the resume reserve)
    reserve_workers: int = 0  # of those, held for dormant sessions' resumes (the resume reserve)
    session_workers: int = 0  # workers serving a session now (not counting the warm ones)
    warm_pokes: int = 0  # calls that kept waiting warm workers warm
    saves_written: int = 0  # browser state saves that changed state.json
    saves_unchanged: int = 0  # saves that found it holding the same state
    accepting: bool = True  # an initialize would be taken now
    max_sessions: int = 0
    max_live_workers: int = 0
    resume_reserve: int = 0  # the reserve's cap (--resume-reserve; 0: none)
    hosts: int | None = None  # workers several sessions share (--sessions-per-browser > 1); None: off
    sessions_per_browser: int = 1


def stats_of(manager: SessionManager) -> ManagerStats:
    """What the manager's parts hold now."""
    saver = manager.continuity.state_saver
    return ManagerStats(
        sessions=len(manager.sessions.live()),
        by_state=dict(Counter(s.state.value for s in manager.sessions)),
        live_workers=manager.supervisor.live_count,
        slots=len(manager.admission),
        warm_workers=len(manager.pool),
        reserve_workers=manager.pool.reserve_ready(),
        session_workers=len(manager.sessions.with_worker()),
        warm_pokes=manager.pool.pokes,
        saves_written=saver.written,
        saves_unchanged=saver.unchanged,
        accepting=manager.accepting_sessions(),
        max_sessions=manager.max_sessions,
        max_live_workers=manager.admission.max_live_workers,
        resume_reserve=manager.resume_reserve,
        hosts=len(manager.hosts) if manager.hosts is not None else None,
        sessions_per_browser=manager.hosts.capacity if manager.hosts is not None else 1,
    )
