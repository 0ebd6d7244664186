"""Tool-call latency through nginx (deploy/cluster/nginx.conf, two nodes) vs straight to one node.

Both sessions live on node "a" with real workers on the same page; calls alternate between them
(which goes first alternates too) so that load from elsewhere on the machine hits both alike.
Prints a Markdown table (see scripts/cluster-bench).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from router.settings import find_browser
from tests.support import RawClient, serve_pages
from tests.support.cluster import open_on, running_cluster

WARMUP = 3
PERCENT = 100


def percentile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=PERCENT, method="inclusive")[q - 1]


def timed_call(client: RawClient) -> float:
    """One tool call that the browser answers from the loaded page (no network, little noise)."""
    started = time.perf_counter()
    text = client.text("browser_snapshot")
    elapsed = time.perf_counter() - started
    if "### Error" in text:
        raise SystemExit(f"tool call failed: {text[:300]}")
    return elapsed * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300, help="tool calls per path (default 300)")
    args = parser.parse_args()
    browser = find_browser()
    if browser is None:
        print("no Chromium found: run scripts/setup", file=sys.stderr)
        return 1
    with (
        tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp,
        serve_pages() as pages,
        running_cluster(Path(tmp), "--idle-timeout", "600", browser=browser) as cluster,
    ):
        direct = open_on(cluster.nodes["a"].url, "a")
        balanced = open_on(cluster.balancer.url, "a")
        for client in (direct, balanced):
            client.text("browser_navigate", url=f"{pages}/second")
        samples: dict[str, list[float]] = {"direct": [], "nginx": []}
        try:
            for i in range(WARMUP + args.calls):
                pair = (("direct", direct), ("nginx", balanced))
                for name, client in pair if i % 2 else reversed(pair):
                    elapsed = timed_call(client)
                    if i >= WARMUP:
                        samples[name].append(elapsed)
        finally:
            direct.close()
            balanced.close()
    d50, d95 = percentile(samples["direct"], 50), percentile(samples["direct"], 95)
    n50, n95 = percentile(samples["nginx"], 50), percentile(samples["nginx"], 95)
    print(f"| tool call (browser_snapshot), {args.calls} calls each | p50 | p95 |")
    print("|---|---|---|")
    print(f"| straight to node a | {d50:.1f} ms | {d95:.1f} ms |")
    print(f"| through nginx (2 nodes) | {n50:.1f} ms | {n95:.1f} ms |")
    print(f"| ratio (goal ≤ 1.1×) | {n50 / d50:.2f}× | {n95 / d95:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
