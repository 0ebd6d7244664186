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
from workers import process_memory
from workers.memory import host_memory
from workers.orphans import processes_for

MIB = 1024 * 1024
MIN_AVAILABLE = 1024 * MIB  # abort the run before the machine runs out of memory
SAMPLE_EVERY = 0.5
SETTLE = 1.0
PARTS = ("queued_ms", "spawn_ms", "handshake_ms", "restore_ms", "storage_ms", "tabs_ms", "reload_ms", "snapshot_ms")


def rss_self() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def mem_available() -> int:
    return host_memory().available() or 0


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
            self.peak_workers = max(self.peak_workers, process_memory.total_pss(pids))
            if self.manager is not None:
                self.peak_live = max(self.peak_live, self.manager.supervisor.live_count)
            self.min_available = min(self.min_available, mem_available())
            if self.min_available < MIN_AVAILABLE:
                print(f"!! available memory below {MIN_AVAILABLE // MIB} MiB: aborting")
                os._exit(3)


def settings_for(state: Path, browser: str, **overrides: Any) -> Any:
    return router_settings(state, worker_command=None, browser=browser, record=True, **overrides)


class _ResumeLog(logging.Handler):
    """Keeps the continuity log's "worker attached" and "state restored" lines: they carry where a
    resume's time went (spawn, handshake replay, restore; storage, tabs, reloads, snapshot)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.parts: list[dict[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        first_use = message.startswith("worker attached") and "reason=first-use" in message
        if message.startswith(("worker attached", "state restored")) and not first_use:
            fields = dict(f.split("=", 1) for f in message.split() if "=" in f)
            self.parts.append({k: float(v) for k, v in fields.items() if k.endswith("_ms")})

    def table(self) -> list[str]:
        out = []
        for key in PARTS:
            values = [p[key] for p in self.parts if key in p]
            if values:
                out.append(f"| of which {key[:-3]} | {statistics.median(values):.0f} ms | {max(values):.0f} ms |")
        return out


def _listen() -> _ResumeLog:
    handler = _ResumeLog()
    continuity_log = logging.getLogger("mcp_router.continuity")
    continuity_log.setLevel(logging.INFO)
    continuity_log.addHandler(handler)
    return handler


def _open_browsed(router: RouterThread, site: str, state: Path, tag: str) -> tuple[RawClient, Any]:
    c = RawClient(router.url)
    c.initialize()
    c.text("browser_navigate", url=f"{site}/set?v={tag}")
    sid = c.session_id or ""
    wait_for(lambda: tag in _state_text(state, sid), timeout=20)
    return c, router.manager.sessions.get(sid)


def _reserve_ready(router: RouterThread, want: int) -> bool:
    return len(router.manager.pool) >= want


def resume_latency(args: argparse.Namespace, browser: str) -> None:
    """One session at a time: hibernate (save + end), then its next call resumes it; with the
    resume reserve (a warm worker waiting) and without (a spawn)."""
    for reserve in (1, 0):
        handler = _listen()
        with tempfile.TemporaryDirectory() as tmp, serve_pages() as site:
            state = Path(tmp)
            rows = []
            settings = settings_for(state, browser, idle_timeout=600, resume_reserve=reserve)
            with RouterThread(settings) as router:
                for i in range(args.sessions):
                    c, session = _open_browsed(router, site, state, f"lat{i}")
                    t0 = time.perf_counter()
                    _run(router, router.manager.hibernate(session))
                    hibernate_s = time.perf_counter() - t0
                    assert session.state is State.HIBERNATED
                    if reserve:
                        wait_for(lambda r=reserve: _reserve_ready(router, r), timeout=60)
                    time.sleep(SETTLE)  # the reserve's launch is not the resume's CPU
                    t0 = time.perf_counter()
                    text = c.text("browser_snapshot")
                    resume_s = time.perf_counter() - t0
                    assert f"set?v=lat{i}" in text, text[:300]
                    t0 = time.perf_counter()
                    c.text("browser_snapshot")
                    steady_s = time.perf_counter() - t0
                    rows.append((hibernate_s, resume_s, steady_s))
                    c.delete()
                    c.close()
        logging.getLogger("mcp_router.continuity").removeHandler(handler)
        print(f"## Resume latency, resume reserve {reserve} ({args.sessions} sessions, real Playwright MCP)\n")
        print("| measure | p50 | max |\n|---|---|---|")
        for name, k in (("hibernate (save state + end worker)", 0), ("first call after resume", 1),
                        ("next call (steady)", 2)):  # fmt: skip
            values = [r[k] * 1000 for r in rows]
            print(f"| {name} | {statistics.median(values):.0f} ms | {max(values):.0f} ms |")
        print("\n".join(handler.table()) + "\n")


def resume_at_once(args: argparse.Namespace, browser: str) -> None:
    """``--sessions`` sessions hibernated, then all of them call at once."""
    handler = _listen()
    n = args.sessions
    with tempfile.TemporaryDirectory() as tmp, serve_pages() as site:
        state = Path(tmp)
        settings = settings_for(state, browser, idle_timeout=600, max_live_workers=max(n + 2, 8))
        with RouterThread(settings) as router:
            opened = [_open_browsed(router, site, state, f"once{i}") for i in range(n)]
            for _, session in opened:
                _run(router, router.manager.hibernate(session))
            time.sleep(SETTLE)

            def resume(item: tuple[int, tuple[RawClient, Any]]) -> float:
                i, (c, _) = item
                t0 = time.perf_counter()
                text = c.text("browser_snapshot")
                took = time.perf_counter() - t0
                assert f"set?v=once{i}" in text, text[:300]
                return took

            with ThreadPoolExecutor(max_workers=n) as pool:
                times = sorted(t * 1000 for t in pool.map(resume, enumerate(opened)))
            for c, _ in opened:
                c.delete()
                c.close()
    print(f"## {n} sessions resuming at once ({os.cpu_count()} cores)\n")
    print("| measure | p50 | max |\n|---|---|---|")
    print(f"| first call after resume | {statistics.median(times):.0f} ms | {max(times):.0f} ms |")
    print("\n".join(handler.table()) + "\n")


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
        print(f"| lowest available memory (cgroup limit included) | {sampler.min_available / MIB:.0f} MiB |")
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
    p = sub.add_parser("at-once")
    p.add_argument("--sessions", type=int, default=10)
    p = sub.add_parser("hundred")
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--idle-timeout", type=float, default=600.0)
    args = parser.parse_args()
    browser = find_browser()
    if not browser:
        raise SystemExit("no Chromium found: run scripts/setup")
    {"resume": resume_latency, "at-once": resume_at_once, "hundred": hundred}[args.mode](args, browser)


if __name__ == "__main__":
    main()
