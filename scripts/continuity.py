"""Continuity measurements: resume latency, and the 100-conversation run (see scripts/continuity)."""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from router.sessions.table import State
from router.settings import find_browser
from tests.e2e.pages import serve_pages
from tests.support import RawClient, RouterThread, router_settings, wait_for
from workers.orphans import processes_for

MIB = 1024 * 1024
MIN_AVAILABLE = 1024 * MIB  # abort the run before the machine runs out of memory
SAMPLE_EVERY = 0.5


def pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def rss_self() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def mem_available() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


class Sampler:
    """Peak PSS of every worker process (node + Chromium) of the state dir, and the low point of
    the machine's available memory."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.peak_workers = 0
        self.peak_live = 0
        self.min_available = mem_available()
        self.stop = threading.Event()
        self.manager: Any = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY):
            pids = processes_for(self.state)
            self.peak_workers = max(self.peak_workers, sum(pss(p) for p in pids))
            if self.manager is not None:
                self.peak_live = max(self.peak_live, self.manager.supervisor.live_count)
            self.min_available = min(self.min_available, mem_available())
            if self.min_available < MIN_AVAILABLE:
                print(f"!! available memory below {MIN_AVAILABLE // MIB} MiB: aborting")
                os._exit(3)


def settings_for(state: Path, browser: str, **overrides: Any) -> Any:
    return router_settings(state, worker_command=None, browser=browser, record=True, **overrides)


class _ResumeLog(logging.Handler):
    """Keeps the manager's "session resumed" lines: they carry the spawn/handshake/restore split."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.parts: list[dict[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("session resumed"):
            fields = dict(f.split("=", 1) for f in message.split() if "=" in f)
            self.parts.append({k: float(v) for k, v in fields.items() if k.endswith("_ms")})


def resume_latency(args: argparse.Namespace, browser: str) -> None:
    handler = _ResumeLog()
    sessions_log = logging.getLogger("mcp_router.sessions")
    sessions_log.setLevel(logging.INFO)
    sessions_log.addHandler(handler)
    with tempfile.TemporaryDirectory() as tmp, serve_pages() as site:
        state = Path(tmp)
        rows = []
        with RouterThread(settings_for(state, browser, idle_timeout=600)) as router:
            for i in range(args.sessions):
                with RawClient(router.url) as c:
                    c.initialize()
                    c.text("browser_navigate", url=f"{site}/set?v=lat{i}")
                    sid = c.session_id or ""
                    wait_for(lambda sid=sid, i=i: f"lat{i}" in _state_text(state, sid), timeout=10)
                    session = router.manager.sessions.get(sid)
                    t0 = time.perf_counter()
                    _run(router, router.manager.hibernate(session))
                    hibernate_s = time.perf_counter() - t0
                    assert session.state is State.HIBERNATED
                    t0 = time.perf_counter()
                    text = c.text("browser_snapshot")
                    resume_s = time.perf_counter() - t0
                    assert f"set?v=lat{i}" in text, text[:300]
                    t0 = time.perf_counter()
                    c.text("browser_snapshot")
                    steady_s = time.perf_counter() - t0
                    rows.append((hibernate_s, resume_s, steady_s))
                    c.delete()
        print(f"## Resume latency ({args.sessions} sessions, real @playwright/mcp + Chromium)\n")
        print("| measure | p50 | max |\n|---|---|---|")
        for name, k in (("hibernate (save state + end worker)", 0), ("first call after resume", 1),
                        ("next call (steady)", 2)):  # fmt: skip
            values = [r[k] * 1000 for r in rows]
            print(f"| {name} | {statistics.median(values):.0f} ms | {max(values):.0f} ms |")
        for key in ("spawn_ms", "handshake_ms", "restore_ms"):
            values = [p[key] for p in handler.parts if key in p]
            if values:
                print(f"| of which {key[:-3]} | {statistics.median(values):.0f} ms | {max(values):.0f} ms |")


def _state_text(state: Path, sid: str) -> str:
    try:
        return (state / "sessions" / sid / "state.json").read_text()
    except OSError:
        return ""


def _run(router: RouterThread, coro: Any) -> Any:
    """Runs a manager coroutine on the router's event loop (the router runs in a thread)."""
    import asyncio

    loop = router.manager._loop
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)


def hundred(args: argparse.Namespace, browser: str) -> None:
    n = args.conversations
    with tempfile.TemporaryDirectory() as tmp, serve_pages() as site:
        state = Path(tmp)
        sampler = Sampler(state)
        settings = settings_for(state, browser, idle_timeout=args.idle_timeout)
        errors: list[str] = []
        started = time.monotonic()
        with RouterThread(settings) as router:
            sampler.manager = router.manager
            sampler.thread.start()
            rss_before = rss_self()
            clients = [RawClient(router.url) for _ in range(n)]

            def first(item: tuple[int, RawClient]) -> None:
                i, c = item
                try:
                    c.initialize()
                    c.text("browser_navigate", url=f"{site}/set?v=c{i}")
                    c.text("browser_snapshot")
                except Exception as exc:  # counted, the run goes on
                    errors.append(f"open {i}: {exc}"[:300])

            def again(item: tuple[int, RawClient]) -> None:
                i, c = item
                try:
                    text = c.text("browser_navigate", url=f"{site}/get")
                    if f"cookie=c{i} storage=c{i}" not in text:
                        errors.append(f"state lost {i}")
                except Exception as exc:
                    errors.append(f"again {i}: {exc}"[:300])

            with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                list(pool.map(first, enumerate(clients)))
                opened_s = time.monotonic() - started
                states_after_open = _tally(router)
                t1 = time.monotonic()
                list(pool.map(again, enumerate(clients)))
                again_s = time.monotonic() - t1
            rss_after = rss_self()
            for c in clients:
                c.delete()
                c.close()
        sampler.stop.set()
        print(f"## {n} conversations, live-worker cap {settings.max_live_workers} "
              f"({os.cpu_count()} cores, {_total_ram() / 2**30:.1f} GiB RAM)\n")  # fmt: skip
        print("| measure | value |\n|---|---|")
        print(f"| open {n} (initialize, navigate, snapshot), concurrency {args.concurrency} | {opened_s:.1f} s |")
        print(f"| sessions by state after opening | {states_after_open} |")
        print(f"| second call of every conversation (resumes the hibernated) | {again_s:.1f} s |")
        print(f"| peak live workers | {sampler.peak_live} |")
        print(f"| peak PSS of all workers (node + Chromium) | {sampler.peak_workers / MIB:.0f} MiB |")
        print(f"| lowest MemAvailable during the run | {sampler.min_available / MIB:.0f} MiB |")
        print(f"| router (+ driver) RSS growth | {(rss_after - rss_before) / MIB:.0f} MiB |")
        print(f"| errors / state lost | {len(errors)} |")
        for e in errors[:10]:
            print(f"- {e}")


def _tally(router: RouterThread) -> str:
    counts: dict[str, int] = {}
    for s in router.manager.sessions:
        counts[s.state.value] = counts.get(s.state.value, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _total_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("resume")
    p.add_argument("--sessions", type=int, default=5)
    p = sub.add_parser("hundred")
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--idle-timeout", type=float, default=600.0)
    args = parser.parse_args()
    browser = find_browser()
    if not browser:
        raise SystemExit("no Chromium found: run scripts/setup")
    {"resume": resume_latency, "hundred": hundred}[args.mode](args, browser)


if __name__ == "__main__":
    main()
