"""Memory of sessions sharing one ``@playwright/mcp --isolated`` worker against a worker each.

Usage: .venv/bin/python scripts/isolated_memory.py [--shared 1,4,8] [--separate 1,8] [--rounds 1]

Each session opens the small local test page (``browser_navigate``, then ``browser_snapshot``);
then the PSS and the private memory (USS) (/proc/<pid>/smaps_rollup) of every process of the
worker or workers — node, the browser and its helpers — are summed, the median of a few samples
once the calls are done. PSS splits shared pages among every process that maps them, other
users' Chromiums too: on a busy machine it reads low. USS (pages no other process maps) does not
move with what else runs.
"shared": N MCP sessions on one --isolated worker (a browser context each, one browser);
"separate": N workers as the router runs them today (a session each, its own browser). The browser
is the one the router would pick (a headless shell first). Prints a Markdown table in MiB.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final, NamedTuple

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]


from bench_lib.procs import SETTLE_GAP_S, SETTLE_SAMPLES, memory_kib  # noqa: E402

from router.settings import find_browser  # noqa: E402
from tests.e2e.isolated_worker import IsolatedWorker, Session  # noqa: E402
from tests.support.pages import serve_pages  # noqa: E402

PAGE: Final = "/workers"


class Figures(NamedTuple):
    pss_kib: float
    uss_kib: float
    processes: int


KIB_PER_MIB: Final = 1024


def open_page(session: Session, base: str) -> None:
    session.tool("browser_navigate", url=base + PAGE)
    session.tool("browser_snapshot")


def settled_kib(workers: list[IsolatedWorker]) -> Figures:
    """Median PSS and USS over a few samples, and the process count, of every process of ``workers``."""
    pss, uss, count = [], [], 0
    for _ in range(SETTLE_SAMPLES):
        time.sleep(SETTLE_GAP_S)
        pids = [pid for worker in workers for pid in worker.tree()]
        sample = memory_kib(pids)
        pss.append(sample[0])
        uss.append(sample[1])
        count = len(pids)
    return Figures(statistics.median(pss), statistics.median(uss), count)


def shared(work: Path, browser: str, base: str, sessions: int) -> Figures:
    with IsolatedWorker(work, browser) as worker, worker.sessions(sessions) as opened:
        for session in opened:
            open_page(session, base)
        return settled_kib([worker])


def separate(work: Path, browser: str, base: str, sessions: int) -> Figures:
    with contextlib.ExitStack() as stack:
        workers = [
            stack.enter_context(IsolatedWorker(work / f"w{n}", browser, isolated=False)) for n in range(sessions)
        ]
        for worker in workers:
            open_page(stack.enter_context(worker.session()), base)
        return settled_kib(workers)


def levels(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=levels, default=[1, 4, 8], help="sessions on one --isolated worker")
    parser.add_argument("--separate", type=levels, default=[1, 8], help="sessions with a worker each")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each level (the median is shown)")
    args = parser.parse_args()
    browser = find_browser()
    if browser is None:
        raise SystemExit("isolated_memory: no browser found (scripts/setup installs one)")
    rows: list[tuple[str, int, Figures]] = []
    with serve_pages() as base, tempfile.TemporaryDirectory(prefix="isolated-memory-") as tmp:
        for kind, run, counts in (("shared", shared, args.shared), ("separate", separate, args.separate)):
            for sessions in counts:
                runs = []
                for round_ in range(args.rounds):
                    runs.append(run(Path(tmp) / f"{kind}-{sessions}-{round_}", browser, base, sessions))
                    pss, uss = runs[-1].pss_kib / KIB_PER_MIB, runs[-1].uss_kib / KIB_PER_MIB
                    print(f"  {kind} {sessions}: PSS {pss:.0f} MiB, USS {uss:.0f} MiB", file=sys.stderr)
                median = Figures(
                    statistics.median(r.pss_kib for r in runs),
                    statistics.median(r.uss_kib for r in runs),
                    runs[-1].processes,
                )
                rows.append((kind, sessions, median))
    print(f"browser: {browser}\n")
    print("| kind | sessions | processes | PSS MiB | per added session | USS MiB | per added session |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, sessions, fig in rows:
        _, first_sessions, first = next(r for r in rows if r[0] == kind)
        added = sessions - first_sessions

        def per_added(now: float, then: float, added: int = added) -> str:
            return f"{(now - then) / added / KIB_PER_MIB:.1f}" if added else "–"

        print(
            f"| {kind} | {sessions} | {fig.processes} | {fig.pss_kib / KIB_PER_MIB:.0f} | "
            f"{per_added(fig.pss_kib, first.pss_kib)} | {fig.uss_kib / KIB_PER_MIB:.0f} | "
            f"{per_added(fig.uss_kib, first.uss_kib)} |"
        )


if __name__ == "__main__":
    main()
