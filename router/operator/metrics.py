"""Prometheus metrics: one registry per app, counters bumped by the manager and the exchange,
gauges read at scrape time.

Gauges (live and warm workers, sessions by state, recorder queue, db size) are computed by a collector when
/metrics is scraped rather than incremented around the code: a missed decrement can never leave
them wrong, and the hot path pays nothing for them. Each app owns its registry (never the
process-wide default), so two routers in one process (tests) never mix their numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from router.http.timing import RequestTiming
    from router.record.stats import RecordStats
    from router.sessions.stats import ManagerStats

PREFIX: Final = "mcp_router"
# Tool names come from clients: past this many distinct names, the rest count as "other" so a
# misbehaving client cannot grow the series without bound.
MAX_TOOL_LABELS: Final = 200
OTHER: Final = "other"
# Label children kept per (method, tool, status): prometheus_client's ``labels()`` validates and
# locks on every call, a measurable share of a relayed call. Bounded: a key past this is looked up
# the slow way, never cached.
MAX_CALL_KEYS: Final = 1000
# A tool label is a plausible tool name (the spec's charset, a sane length) or "other": a 100 KB
# name must never become a series.
_TOOL_LABEL: Final = re.compile(r"[A-Za-z0-9_./:-]{1,64}")
# The method label comes from this fixed set (every revision's client-to-server methods);
# anything else a client sends counts as "other".
KNOWN_METHODS: Final = frozenset({
    "initialize", "ping", "server/discover", "subscriptions/listen",
    "tools/list", "tools/call",
    "resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list", "prompts/get", "completion/complete", "logging/setLevel",
    "tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
    "notifications/initialized", "notifications/cancelled", "notifications/progress",
    "notifications/roots/list_changed",
})
SPAWN_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
CALL_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OVERHEAD_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# Session states → the reason label; "reaped" reads better as what caused it.
REAP_REASONS: Final = {"reaped": "idle"}


# A call's children: its request counter, and for tools/call its tool counter and latency histogram.
_CallSeries = tuple[Counter, Counter | None, Histogram | None]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.spawns = Counter(f"{PREFIX}_spawns", "Worker spawns", ["outcome"], registry=r)
        self.spawn_seconds = Histogram(
            f"{PREFIX}_spawn_seconds", "Time until a spawned worker is ready", buckets=SPAWN_BUCKETS, registry=r
        )
        self.reaps = Counter(
            f"{PREFIX}_reaps", "Sessions put to sleep or ended, by reason (idle, hibernated, closed, error)",
            ["reason"], registry=r,
        )
        self.crashes = Counter(
            f"{PREFIX}_crashes", "Workers lost: exited on their own or failed their health checks", registry=r
        )
        self.restarts = Counter(f"{PREFIX}_restarts", "Workers restarted after a crash or failed health", registry=r)
        self.resumes = Counter(f"{PREFIX}_resumes", "Sessions resumed on a new worker", registry=r)
        self.tool_calls = Counter(f"{PREFIX}_tool_calls", "tools/call requests", ["tool", "status"], registry=r)
        self.requests = Counter(f"{PREFIX}_requests", "Client requests by JSON-RPC method", ["method", "status"],
                                registry=r)
        self.call_seconds = Histogram(
            f"{PREFIX}_call_seconds", "tools/call latency (router in to answer out)", ["tool"],
            buckets=CALL_BUCKETS, registry=r,
        )
        self.router_seconds = Histogram(
            f"{PREFIX}_router_added_seconds",
            "Time a forwarded request spent in the router, excluding the wait for the worker (approximate)",
            buckets=OVERHEAD_BUCKETS, registry=r,
        )
        self._tools: set[str] = set()
        self._per_call: dict[tuple[str, str | None, str], _CallSeries] = {}

    # ---------------------------------------------------------------- instrumentation

    def spawned(self, seconds: float) -> None:
        self.spawns.labels("ok").inc()
        self.spawn_seconds.observe(seconds)

    def spawn_failed(self) -> None:
        self.spawns.labels("failed").inc()

    def ended(self, state: str) -> None:
        self.reaps.labels(REAP_REASONS.get(state, state)).inc()

    def crashed(self) -> None:
        self.crashes.inc()

    def restarted(self) -> None:
        self.restarts.inc()

    def resumed(self) -> None:
        self.resumes.inc()

    def call_done(
        self, method: str, tool: str | None, status: str, seconds: float, timing: RequestTiming | None = None
    ) -> None:
        key = (method, tool, status)
        series = self._per_call.get(key)
        if series is None:
            series = self._call_series(method, tool, status)
            # Only names that are their own labels: junk methods or tool names must not fill memory.
            known = method in KNOWN_METHODS and (tool is None or tool in self._tools)
            if known and len(self._per_call) < MAX_CALL_KEYS:
                self._per_call[key] = series
        requests, tool_calls, call_seconds = series
        requests.inc()
        if tool_calls is not None and call_seconds is not None:
            tool_calls.inc()
            call_seconds.observe(seconds)
        if timing is not None:
            timing.upstream_s = seconds

    def _call_series(self, method: str, tool: str | None, status: str) -> _CallSeries:
        requests = self.requests.labels(method if method in KNOWN_METHODS else OTHER, status)
        if method != "tools/call":
            return requests, None, None
        label = self._tool_label(tool or "")
        return requests, self.tool_calls.labels(label, status), self.call_seconds.labels(label)

    def _tool_label(self, tool: str) -> str:
        if tool in self._tools:
            return tool
        if len(self._tools) >= MAX_TOOL_LABELS or _TOOL_LABEL.fullmatch(tool) is None:
            return OTHER
        self._tools.add(tool)
        return tool

    # ---------------------------------------------------------------- scrape time

    def watch(
        self, stats: Callable[[], ManagerStats], record_stats: Callable[[], RecordStats] | None, db_path: Path | None
    ) -> None:
        """Registers the scrape-time gauges, read from these snapshots; called once by create_app."""
        self.registry.register(_LiveCollector(stats, record_stats, db_path))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def endpoint(self, request: Request) -> Response:
        return Response(self.render(), media_type=CONTENT_TYPE_LATEST)


class _LiveCollector(Collector):
    def __init__(
        self, stats: Callable[[], ManagerStats], record_stats: Callable[[], RecordStats] | None, db_path: Path | None
    ) -> None:
        self.stats = stats
        self.record_stats = record_stats
        self.db_path = db_path

    def collect(self) -> Iterable[Metric]:
        now = self.stats()
        yield _one(GaugeMetricFamily, "live_workers", "Worker processes alive now", now.live_workers)
        yield _one(GaugeMetricFamily, "warm_workers", "Warm workers ready in the pool", now.warm_workers)
        yield _one(
            GaugeMetricFamily, "reserve_workers", "Warm workers held for sleeping sessions", now.reserve_workers
        )  # fmt: skip
        if now.hosts is not None:
            yield _one(GaugeMetricFamily, "shared_workers", "Workers that sessions share (--sessions-per-browser)",
                       now.hosts)  # fmt: skip
        yield _one(
            CounterMetricFamily, "warm_pokes", "Calls that kept waiting warm workers warm (--keep-warm-interval)",
            now.warm_pokes,
        )  # fmt: skip
        saves = CounterMetricFamily(
            f"{PREFIX}_state_saves", "Browser state saves, by whether state.json changed", labels=["outcome"]
        )
        saves.add_metric(["written"], now.saves_written)
        saves.add_metric(["unchanged"], now.saves_unchanged)
        yield saves
        sessions = GaugeMetricFamily(f"{PREFIX}_sessions", "Sessions the router holds, by state", labels=["state"])
        for state, count in sorted(now.by_state.items()):
            sessions.add_metric([state], count)
        yield sessions
        if self.record_stats is not None:
            stats = self.record_stats()
            for name, help_text, number in (
                ("recorder_queue_depth", "Record items waiting for the writer", stats.queue_len),
                ("recorder_dropped", "Record items refused because the queue was full (since start)", stats.dropped),
                ("recorder_queue_bytes", "Bytes of params and results waiting for the writer", stats.queue_bytes),
                ("recorder_failed_batches", "Record batches that lost rows (since start)", stats.failed_batches),
                ("recorder_failed_rows", "Record rows that could not be written (since start)", stats.failed_rows),
                (
                    "recorder_linked_reads",
                    "Answers whose linked files were read after their row, on the writer thread (since start)",
                    stats.linked_reads,
                ),
            ):
                yield _one(GaugeMetricFamily, name, help_text, number)
        if self.db_path is not None:
            size = _db_size(self.db_path)
            yield _one(GaugeMetricFamily, "db_size_bytes", "Size of the record database with its WAL", size)


def _one(
    family: type[GaugeMetricFamily | CounterMetricFamily], name: str, help_text: str, value: float
) -> GaugeMetricFamily | CounterMetricFamily:
    metric = family(f"{PREFIX}_{name}", help_text)
    metric.add_metric([], value)
    return metric


def _db_size(db_path: Path) -> int:
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += db_path.with_name(db_path.name + suffix).stat().st_size
        except OSError:
            continue
    return total

