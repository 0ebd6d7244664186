"""/metrics: Prometheus text that parses, and counters that move with a real flow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from router.operator.metrics import MAX_TOOL_LABELS, OTHER, Metrics
from tests.support import RawClient, RouterThread, auth_headers, router_settings, wait_for

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Scrape:
    """One /metrics answer, parsed: a metric or series that is not there fails the test."""

    samples: Series
    families: set[str]  # metric names as declared by `# TYPE` (counters without `_total`)

    def value(self, name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        assert key in self.samples, f"no series {name}{labels or ''} in /metrics"
        return self.samples[key]

    def value_or_zero(self, name: str, **labels: str) -> float:
        """For a labelled series, which appears at its first count; the metric itself must be there."""
        family = name.removesuffix("_total")
        assert family in self.families, f"no metric {family} in /metrics"
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(router: RouterThread) -> Scrape:
    answer = httpx.get(f"{router.base_url}/metrics", headers=auth_headers(), timeout=10, trust_env=False)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    families = list(text_string_to_metric_families(answer.text))
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families
        for sample in family.samples
    }
    return Scrape(samples, {family.name for family in families})


def test_scrape_fails_on_a_vanished_metric() -> None:
    """The helper the tests below lean on: a renamed or removed metric cannot read as 0."""
    found = Scrape({("mcp_router_spawns_total", (("outcome", "ok"),)): 1.0}, {"mcp_router_spawns"})
    assert found.value("mcp_router_spawns_total", outcome="ok") == 1
    assert found.value_or_zero("mcp_router_spawns_total", outcome="failed") == 0
    with pytest.raises(AssertionError, match="no series"):
        found.value("mcp_router_spawns_total", outcome="failed")
    with pytest.raises(AssertionError, match="no metric"):
        found.value_or_zero("mcp_router_spawn_total", outcome="ok")


def test_counters_and_gauges_follow_a_flow(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir, record=True)) as router:
        before = scrape(router)
        assert before.value("mcp_router_live_workers") == 0
        assert before.value_or_zero("mcp_router_spawns_total", outcome="ok") == 0
        with RawClient(router.url) as c:
            c.initialize()
            c.call("echo", text="one")
            c.call("echo", text="two")
            c.call("no_such_tool")
            during = scrape(router)
            assert during.value("mcp_router_live_workers") == 1
            assert during.value("mcp_router_sessions", state="live") == 1
            assert during.value("mcp_router_spawns_total", outcome="ok") == 1
            assert during.value("mcp_router_spawn_seconds_count") == 1
            assert during.value("mcp_router_tool_calls_total", tool="echo", status="success") == 2
            assert during.value("mcp_router_tool_calls_total", tool="no_such_tool", status="error") == 1
            assert during.value("mcp_router_call_seconds_count", tool="echo") == 2
            assert during.value("mcp_router_requests_total", method="initialize", status="success") == 1
            # Router-added time: observed for each answered request that did not wait for a spawn
            # (the three tool calls, not initialize), and small next to a call.
            assert during.value("mcp_router_router_added_seconds_count") == 3
            assert during.value("mcp_router_router_added_seconds_sum") < 0.5
            assert during.value("mcp_router_db_size_bytes") > 0
            assert during.value("mcp_router_recorder_queue_depth") >= 0
            c.delete()

        # A worker that dies on its own is a crash; the session stays, dormant, until it is ended.
        with RawClient(router.url) as c:
            c.initialize()
            c.post({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "crash", "arguments": {}}})
            wait_for(lambda: scrape(router).value("mcp_router_crashes_total") == 1)
            crashed = wait_for(lambda: (s := scrape(router)) and s.value("mcp_router_live_workers") == 0 and s)
            assert crashed.value("mcp_router_sessions", state="crashed") == 1
            assert crashed.value_or_zero("mcp_router_sessions", state="live") == 0
            c.delete()
        after = scrape(router)
        assert after.value("mcp_router_spawns_total", outcome="ok") == 2
        assert after.value("mcp_router_reaps_total", reason="closed") == 2
        assert after.value_or_zero("mcp_router_sessions", state="crashed") == 0


def test_spawn_failures_are_counted(state_dir: Path) -> None:
    settings = router_settings(state_dir, worker_command=["/bin/false", "{port}"])
    with RouterThread(settings) as router, RawClient(router.url) as c:
        answer = c.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert answer.status_code == 503
        samples = scrape(router)
        assert samples.value("mcp_router_spawns_total", outcome="failed") == 1
        assert "mcp_router_db_size_bytes" not in samples.families  # recording off: no database to measure


def test_registries_are_per_app_and_tool_labels_are_bounded() -> None:
    a, b = Metrics(), Metrics()
    for i in range(MAX_TOOL_LABELS + 5):
        a.call_done("tools/call", f"tool{i}", "success", 0.01)
    text_a, text_b = a.render().decode(), b.render().decode()
    assert f'tool="{OTHER}"' in text_a and 'tool="tool0"' in text_a
    assert f'tool="tool{MAX_TOOL_LABELS + 1}"' not in text_a
    assert "tool0" not in text_b


def test_idle_reap_and_resume_are_counted(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir, idle_timeout=0.3)) as router, RawClient(router.url) as c:
        c.initialize()
        c.start_worker()
        wait_for(lambda: scrape(router).value_or_zero("mcp_router_reaps_total", reason="idle") == 1)
        assert c.text("echo", text="back") == "back"  # the next call resumes the session
        samples = scrape(router)
        assert samples.value("mcp_router_resumes_total") == 1
        assert samples.value("mcp_router_spawns_total", outcome="ok") == 2
        c.delete()
