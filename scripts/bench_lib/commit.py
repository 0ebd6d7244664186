"""What the record's promise costs a tool answer: ``write_ahead()`` after a call's request and
answer are queued (the wait an answer has before it leaves: one write() to the write-ahead
file), and the commit ``settle()`` makes once the answer has left, on a real SQLite file in WAL mode,
with a realistic snapshot answer. In-process; the router's own Recorder, given what the proxy
gives it (router/http/exchange.py, ``Extracted.for_record``): an answer that keeps all it has in
its text (an inline snapshot), or links only its snapshot file (a navigation), comes with its
snapshot and no output dir to read later. Timed: what the answer waits for, ``settle()`` after it,
and apart from them the read of a linked snapshot before it; counted: the process's CPU and its
commits per call, with the router's grouping of commits (``SETTLE_DELAY_S``) and with a commit
after every answer (``settle_delay=0``, as before round 16)."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from router.layout import StateLayout
from router.record.commit_timer import SETTLE_DELAY_S
from router.record.recorder import Recorder
from router.record.snapshots import summarize

SNAPSHOT = "\n".join(f'- button "b{i}" [ref=e{i}]' for i in range(400))
ANSWERS = {
    "browser_snapshot": {"content": [{"type": "text", "text": f"### Snapshot\n```yaml\n{SNAPSHOT}\n```\n"}]},
    "browser_tabs": {"content": [{"type": "text", "text": "### Result\n- 0: (current) [t](http://127.0.0.1/)"}]},
    "browser_navigate": {},  # links a page-*.yml the worker wrote (navigate_answer)
}
NAVIGATE = "### Page\n- Page URL: http://127.0.0.1/\n- Page Title: t\n### Snapshot\n- [Snapshot]({path})"


def navigate_answer(out: Path, i: int) -> dict[str, Any]:
    """A navigation's answer and the snapshot file it links, written as the worker would."""
    path = out / f"page-{i}.yml"
    path.write_text(SNAPSHOT)
    return {"content": [{"type": "text", "text": NAVIGATE.format(path=path)}]}
PAUSE_S = 0.002  # between calls, as a client's turn-around


@dataclass
class CommitResult:
    tool: str
    settle_delay: float
    calls: int
    p50_us: float
    p95_us: float
    commit_p50_us: float  # settle(): the commit, or its timer, once the answer has left
    cpu_us_per_call: float  # the whole process: loop and writer thread
    commits_per_call: float
    read_p50_us: float  # Extracted.for_record: a linked snapshot read into the row, before the commit


async def _one(tool: str, calls: int, warmup: int, settle_delay: float) -> CommitResult:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        recorder = Recorder(root / "router.db", layout=StateLayout(root), settle_delay=settle_delay)
        async with recorder.run():
            out = root / "out"
            out.mkdir()
            recorder.session_opened("bench", client_info={"name": "bench"}, protocol_version=None, port=1, pid=1)
            await recorder.flush()
            waits: list[float] = []
            commits: list[float] = []
            reads: list[float] = []
            answers = [
                navigate_answer(out, i) if tool == "browser_navigate" else ANSWERS[tool] for i in range(warmup + calls)
            ]
            results = [json.dumps(a) for a in answers]
            facts = [summarize(a) for a in answers]  # the exchange's, before the record's part
            cpu0, batches0 = time.process_time(), recorder.stats().batches
            for i in range(warmup + calls):
                ref = f"ref-{i}"
                recorder.request(ref, "bench", "tools/call", tool, {"name": tool, "arguments": {}}, size=60)
                t0 = time.perf_counter()
                now = facts[i].for_record(out)  # as the exchange does for each answer
                read = time.perf_counter() - t0
                snapshot, console = now or (None, None)
                recorder.response(
                    ref, status="success", result=results[i], page_snapshot=snapshot, console_logs=console,
                    duration_ms=1.0, output_dir=None if now is not None else out,
                )
                t0 = time.perf_counter()
                assert await recorder.write_ahead()
                t1 = time.perf_counter()
                recorder.settle()  # as the exchange does once the answer has left
                t2 = time.perf_counter()
                if i >= warmup:
                    waits.append((t1 - t0) * 1e6)
                    commits.append((t2 - t1) * 1e6)
                    reads.append(read * 1e6)
                await asyncio.sleep(PAUSE_S)
            await recorder.flush()
            cpu = time.process_time() - cpu0
            batches = recorder.stats().batches - batches0
    waits.sort()
    return CommitResult(
        tool, settle_delay, calls, statistics.median(waits), waits[int(len(waits) * 0.95)],
        statistics.median(commits), cpu * 1e6 / (warmup + calls), batches / (warmup + calls),
        statistics.median(reads),
    )


async def measure(calls: int = 500, warmup: int = 50) -> list[CommitResult]:
    return [await _one(tool, calls, warmup, delay) for tool in ANSWERS for delay in (SETTLE_DELAY_S, 0.0)]


def table(results: list[CommitResult]) -> list[str]:
    return [
        f"### The record's promise on a tool answer's path ({results[0].calls} calls per answer kind, "
        f"`Recorder.write_ahead()` after request + answer, then `settle()`, {PAUSE_S * 1000:.0f} ms between calls)",
        "",
        "| answer | commits | the answer waits (write-ahead) p50 µs | p95 µs | `settle()` after it, p50 µs "
        "| reading its linked snapshot first, p50 µs | CPU µs per call (loop + writer thread) | commits per call |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| `{r.tool}` | {_mode(r.settle_delay)} | {r.p50_us:.0f} | {r.p95_us:.0f} | {r.commit_p50_us:.0f} "
            f"| {r.read_p50_us:.0f} | {r.cpu_us_per_call:.0f} | {r.commits_per_call:.2f} |"
            for r in results
        ),
    ]


def _mode(settle_delay: float) -> str:
    return f"grouped ({settle_delay * 1000:.0f} ms)" if settle_delay > 0 else "one per answer"

