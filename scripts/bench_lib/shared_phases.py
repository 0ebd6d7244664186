"""The phases of sessions sharing a browser (``mcp-router serve --sessions-per-browser N``), each
against its goal (issue 46), selected with ``--only`` one by one or all as ``--only shared``:

- ``shared-memory``: PSS of the router's whole process tree with 1 and with --shared-sessions
  sessions (each navigated and snapshotted, all live), shared and a worker per session;
- ``shared-left``: what runs under the state dir once --shared-sessions abandoned sessions are
  reaped and their host's idle timeout has passed (``--resume-reserve 0``);
- ``shared-resume``: a reaped session's first call while another session keeps its host up;
- ``shared-throughput``: --concurrency sessions looping navigate + snapshot, shared and a worker
  per session (as many as the machine's memory holds)."""

from __future__ import annotations

import argparse
from typing import Final

from bench_lib import left_behind, shared_load, shared_resume
from bench_lib.handshakes import REAP_IDLE
from bench_lib.measure import med_ms, say
from bench_lib.report import Goal, load_average
from bench_lib.targets import Env

ALL: Final = "shared"
MEMORY, LEFT, RESUME, THROUGHPUT = "shared-memory", "shared-left", "shared-resume", "shared-throughput"
PHASES: Final = (MEMORY, LEFT, RESUME, THROUGHPUT)
GOAL_TOTAL_MIB: Final = 640.0  # the shared tree with --shared-sessions sessions
GOAL_PER_ADDED_MIB: Final = 40.0
GOAL_RESUME_S: Final = 0.4  # p50
GOAL_RATE: Final = 1.0  # a worker per session's calls/s ÷ shared calls/s: shared at least as fast
MIB: Final = 1024


def expand(phases: set[str]) -> set[str]:
    """``shared`` stands for all of PHASES."""
    return (phases - {ALL}) | set(PHASES) if ALL in phases else phases


def _loaded(lines: list[str]) -> list[str]:
    """A phase's table, then the load average it ran under (the machine is shared)."""
    return [*lines, "", f"Load average (1, 5, 15 min) after the phase: {load_average()}.", ""]


async def _memory(a: argparse.Namespace, env: Env, page: str) -> tuple[list[str], list[Goal]]:
    say(f"shared-memory: 1 and {a.shared_sessions} sessions, each on the page and snapshotted, both modes")
    modes = shared_load.modes(a.shared_capacity)
    rows = [await shared_load.memory(env, page, mode, a.shared_sessions) for mode in modes]
    lines = [
        f"### Memory of {a.shared_sessions} live sessions, each on the test page after a snapshot "
        "(the router's whole process tree: router, workers, Chromium and its helpers; medians of settled samples)",
        "",
        *shared_load.memory_table(rows),
        "",
        "PSS splits pages shared with other processes (other users' Chromiums too) among them, so on a busy "
        "machine it reads low; USS counts only the tree's private pages.",
    ]
    shared, separate = rows
    total = shared.points[-1].pss_kib / MIB if shared.points and not shared.error else None
    added, added_separate = shared.per_added_kib(), separate.per_added_kib()
    note = f"USS {shared.points[-1].uss_kib / MIB:.0f} MiB" if shared.points else ""
    if shared.off_page:
        note += f"; {len(shared.off_page)} sessions' current tab not the page (a blank tab beside it)"
    if separate.points:
        note += f"; a worker per session: {separate.points[-1].pss_kib / MIB:.0f} MiB"
    added_uss = shared.per_added_kib(uss=True)
    note_added = f"USS {added_uss / MIB:.1f} MiB" if added_uss is not None else ""
    if added_separate is not None:
        note_added += f"; a worker per session: {added_separate / MIB:.1f} MiB"
    goals = [
        Goal(f"PSS of {a.shared_sessions} shared sessions, router + workers + Chromium", total, GOAL_TOTAL_MIB,
             " MiB", note),
        Goal("PSS per added shared session", added / MIB if added is not None else None, GOAL_PER_ADDED_MIB,
             " MiB", note_added),
    ]  # fmt: skip
    return _loaded(lines), goals


async def _left(a: argparse.Namespace, env: Env, page: str) -> tuple[list[str], list[Goal]]:
    flags = ("--sessions-per-browser", str(a.shared_capacity), "--resume-reserve", "0")
    label = f"`--sessions-per-browser {a.shared_capacity} --resume-reserve 0`"
    say(f"shared-left: {a.shared_sessions} abandoned sessions reaped, then the host's idle timeout")
    row = await left_behind.left_after_reap(env, page, label, flags, 0, abandoned=a.shared_sessions)
    lines = [
        *left_behind.table([row], workers="hosts"),
        "",
        f"An empty host ends `--idle-timeout` ({REAP_IDLE:g} s) after its last session left; "
        f"counted {left_behind.AFTER_REAP:g} s after the last reap.",
    ]
    note = f"{row.workers} hosts, {row.browsers} Chromium" + (
        f"; {len(row.unopened)} sessions did not find the page" if row.unopened else "")  # fmt: skip
    goal = Goal(f"processes left after {row.abandoned} shared sessions and their host's idle timeout",
                row.processes, 0, "", note)  # fmt: skip
    return _loaded(lines), [goal]


async def _resume(a: argparse.Namespace, env: Env, page: str) -> tuple[list[str], list[Goal]]:
    shapes = ((shared_resume.PLAIN, a.shared_reps), (shared_resume.CLAUDE_CODE, a.shared_cc_reps))
    rows = []
    for shape, reps in shapes:
        say(f"shared-resume: {reps} sessions ({shape.label}) reaped and resumed on a host kept up")
        rows.append(await shared_resume.measure(env, page, shape, reps, a.shared_capacity))
    goals = []
    for row in rows:
        p50 = med_ms(row.firsts) / 1000 if row.firsts else None
        before = f"; before the reap: {med_ms(row.before):.0f} ms" if row.before else ""
        goals.append(Goal(f"resume on a shared browser, worker up, {row.shape.label}: first call p50", p50,
                          GOAL_RESUME_S, " s", f"{len(row.firsts)} resumes{before}"))  # fmt: skip
        lost = f"{len(row.unopened)} right after their first navigate, {len(row.missing)} at or after the resume"
        goals.append(Goal(f"sessions not on their page, {row.shape.label}", len(row.unopened) + len(row.missing),
                          0, "", lost))  # fmt: skip
    return _loaded(shared_resume.table(rows, a.shared_capacity)), goals


async def _throughput(a: argparse.Namespace, env: Env, page: str) -> tuple[list[str], list[Goal]]:
    sessions, fit_note = shared_load.fitting_sessions(a.concurrency)
    say(f"shared-throughput: {sessions} sessions at once, both modes" + (f" ({fit_note})" if fit_note else ""))
    rows = [
        await shared_load.throughput(env, page, mode, sessions, a.duration)
        for mode in shared_load.modes(a.shared_capacity)
    ]
    lines = [
        f"### Throughput: {sessions} concurrent sessions, each `browser_navigate` + `browser_snapshot` in a loop "
        f"for {a.duration:g} s",
        "",
        *shared_load.throughput_lines(rows),
    ]
    if fit_note:
        lines += [f"- {fit_note}"]
    shared, separate = (r.result for r in rows)
    errors = shared.errors + separate.errors if shared and separate else None
    ratio = (separate.calls / separate.seconds) / (shared.calls / shared.seconds) if shared and separate else None
    rates = f"{shared.calls / shared.seconds:.1f} vs {separate.calls / separate.seconds:.1f} calls/s" if (
        shared and separate) else "a run failed"  # fmt: skip
    goals = [
        Goal(f"errors, {sessions} sessions at once (shared + a worker per session)", errors, 0, "",
             f"{shared.errors if shared else '—'} + {separate.errors if separate else '—'}"),
        Goal("calls/s, a worker per session ÷ shared", ratio, GOAL_RATE, "×", rates),
    ]  # fmt: skip
    return _loaded(lines), goals


async def run(a: argparse.Namespace, env: Env, page: str) -> tuple[list[str], list[Goal]]:
    """The shared phases in ``a.only``: their tables and goals."""
    lines: list[str] = []
    goals: list[Goal] = []
    for phase, step in ((MEMORY, _memory), (LEFT, _left), (RESUME, _resume), (THROUGHPUT, _throughput)):
        if phase in a.only:
            got_lines, got_goals = await step(a, env, page)
            lines += got_lines
            goals += got_goals
    return lines, goals
