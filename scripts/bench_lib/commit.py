"""The commit: what the record costs a tool answer on its way out. A tool answer leaves once its
call's rows are durable (router/http/exchange.py), so that a SIGKILL of the router loses no call
its client saw answered; this phase times that wait.

In-process, on a real SQLite file in WAL mode, with the router's own Recorder given what the
exchange gives it: the call's request, then its answer with what ``Extracted.for_record`` read
(an answer that keeps all it has in its text, an inline snapshot, or links only its snapshot
file, a navigation, comes with its snapshot and no output dir to read later). Timed: the wait
(``answer_committed``), and apart from it the read of a linked snapshot before it; counted: the
process's CPU per call (loop and writer thread) and its commits per call."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from router.layout import StateLayout
from router.record.recorder import Recorder
from router.record.snapshots import summarize

SNAPSHOT: Final = "\n".join(f'- button "b{i}" [ref=e{i}]' for i in range(400))
ANSWERS: Final[dict[str, dict[str, Any]]] = {
    "browser_snapshot": {"content": [{"type": "text", "text": f"### Snapshot\n```yaml\n{SNAPSHOT}\n```\n"}]},
    "browser_tabs": {"content": [{"type": "text", "text": "### Result\n- 0: (current) [t](http://127.0.0.1/)"}]},
    "browser_navigate": {},  # links a page-*.yml the worker wrote (navigate_answer)
}
NAVIGATE: Final = "### Page\n- Page URL: http://127.0.0.1/\n- Page Title: t\n### Snapshot\n- [Snapshot]({path})"
PAUSE_S: Final = 0.002  # between calls, as a client's turn-around


async def answer_committed(recorder: Recorder) -> bool:
    """What a tool answer awaits before it leaves, as the exchange awaits it: its call's rows
    durable. The one place this phase calls the recorder's promise, so that a change of the
    recorder's API is a change of this body only."""
    durable = await recorder.write_ahead()
    recorder.settle()  # as the exchange does once the answer has left
    return durable


def navigate_answer(out: Path, i: int) -> dict[str, Any]:
    """A navigation's answer and the snapshot file it links, written as the worker would."""
    path = out / f"page-{i}.yml"
    path.write_text(SNAPSHOT)
    return {"content": [{"type": "text", "text": NAVIGATE.format(path=path)}]}


@dataclass
class CommitResult:
    tool: str
    calls: int
    p50_us: float  # what the answer waits for
    p95_us: float
    cpu_us_per_call: float  # the whole process: loop and writer thread
    commits_per_call: float
    read_p50_us: float  # Extracted.for_record: a linked snapshot read into the row, before the wait


async def _one(tool: str, calls: int, warmup: int) -> CommitResult:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        recorder = Recorder(root / "router.db", layout=StateLayout(root))
        async with recorder.run():
            out = root / "out"
            out.mkdir()
            recorder.session_opened("bench", client_info={"name": "bench"}, protocol_version=None, port=1, pid=1)
            await recorder.flush()
            waits: list[float] = []
            reads: list[float] = []
            answers = [
                navigate_answer(out, i) if tool == "browser_navigate" else ANSWERS[tool] for i in range(warmup + calls)
            ]
            results = [json.dumps(a, separators=(",", ":")).encode() for a in answers]  # as the exchange encodes
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
                assert await answer_committed(recorder)
                waited = time.perf_counter() - t0
                if i >= warmup:
                    waits.append(waited * 1e6)
                    reads.append(read * 1e6)
                await asyncio.sleep(PAUSE_S)
            await recorder.flush()
            cpu = time.process_time() - cpu0
            batches = recorder.stats().batches - batches0
    waits.sort()
    return CommitResult(
        tool, calls, statistics.median(waits), waits[int(len(waits) * 0.95)], cpu * 1e6 / (warmup + calls),
        batches / (warmup + calls), statistics.median(reads),
    )


async def measure(calls: int = 500, warmup: int = 50) -> list[CommitResult]:
    return [await _one(tool, calls, warmup) for tool in ANSWERS]


def table(results: list[CommitResult]) -> list[str]:
    return [
        f"### The commit: what a tool answer waits for before it leaves ({results[0].calls} calls per answer "
        f"kind, in-process: the wait for its call's rows to be durable, {PAUSE_S * 1000:.0f} ms between calls)",
        "",
        "| answer | the answer waits, p50 µs | p95 µs | reading its linked snapshot first, p50 µs "
        "| CPU µs per call (loop + writer thread) | commits per call |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| `{r.tool}` | {r.p50_us:.0f} | {r.p95_us:.0f} | {r.read_p50_us:.0f} | {r.cpu_us_per_call:.0f} "
            f"| {r.commits_per_call:.2f} |"
            for r in results
        ),
    ]
