"""/metrics labels come from a fixed set: client-chosen methods and tool names cannot grow it."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from router.operator.metrics import OTHER, Metrics
from tests.support import RawClient, RouterThread, auth_headers, router_settings

HUGE = 100_000


def _metrics(router: RouterThread) -> str:
    answer = httpx.get(f"http://127.0.0.1:{router.port}/metrics", headers=auth_headers(), timeout=10, trust_env=False)
    assert answer.status_code == 200
    return answer.text


def _labels(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_huge_method_and_tool_names_do_not_grow_metrics(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir)) as router, RawClient(router.url) as c:
        c.initialize()
        c.post({"jsonrpc": "2.0", "id": 1, "method": "made/up", "params": {}})
        c.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "made up", "arguments": {}}})
        before = _metrics(router)
        for i in range(3):
            c.post({"jsonrpc": "2.0", "id": 10 + i, "method": f"{i}" + "m" * HUGE, "params": {}})
            c.post({"jsonrpc": "2.0", "id": 20 + i, "method": "tools/call",
                    "params": {"name": f"{i}" + "t" * HUGE, "arguments": {}}})
            c.post({"jsonrpc": "2.0", "id": 30 + i, "method": "tools/call",
                    "params": {"name": f"bad\n{i}", "arguments": {}}})
        after = _metrics(router)
    assert _labels(after) - _labels(before) == set()
    assert len(after) < len(before) + 1000
    assert all(len(value) <= 64 for _, labels in _labels(after) for _, value in labels)


def test_method_labels_are_known_methods_or_other() -> None:
    metrics = Metrics()
    metrics.call_done("tools/list", None, "success", 0.01)
    metrics.call_done("m" * HUGE, None, "error", 0.01)
    metrics.call_done("tools/call", "x" * 65, "error", 0.01)
    metrics.call_done("tools/call", "browser_navigate", "success", 0.01)
    labels = [dict(pairs) for _, pairs in _labels(metrics.render().decode())]
    methods = {one["method"] for one in labels if "method" in one}
    tools = {one["tool"] for one in labels if "tool" in one}
    assert methods == {"tools/list", OTHER, "tools/call"}
    assert tools == {OTHER, "browser_navigate"}


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def test_repeated_calls_count_on_the_same_series_and_junk_stays_other() -> None:
    # The per-call label children are kept between calls: the counts must still add up per series,
    # and junk names (never kept) must still land on "other", however many there are.
    metrics = Metrics()
    for _ in range(3):
        metrics.call_done("tools/call", "browser_tabs", "success", 0.01)
    metrics.call_done("tools/call", "browser_tabs", "error", 0.02)
    for i in range(1200):
        metrics.call_done(f"junk/{i}", None, "error", 0.01)
        metrics.call_done("tools/call", f"bad name {i}", "error", 0.01)
    assert _value(metrics, "mcp_router_tool_calls_total", tool="browser_tabs", status="success") == 3
    assert _value(metrics, "mcp_router_tool_calls_total", tool="browser_tabs", status="error") == 1
    assert _value(metrics, "mcp_router_call_seconds_count", tool="browser_tabs") == 4
    assert _value(metrics, "mcp_router_requests_total", method="tools/call", status="success") == 3
    assert _value(metrics, "mcp_router_requests_total", method=OTHER, status="error") == 1200
    assert _value(metrics, "mcp_router_tool_calls_total", tool=OTHER, status="error") == 1200
