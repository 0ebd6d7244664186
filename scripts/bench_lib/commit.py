"""The commit: what the record costs a tool answer on its way out. A tool answer leaves once its
call's rows are committed to SQLite (router/http/exchange.py), so that a SIGKILL of the router
loses no call its client saw answered; this phase times that wait, for one conversation calling
alone and for many calling at once (their rows share a commit).

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
from collections.abc import Awaitable, Callable
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
    """Waits until everything the recorder holds is committed: a call's rows, as a tool answer
    waits for them. ``committed()`` where the recorder has it (the one log: rows committed in a
    group on the writer thread); else ``flush_rows()``, the same commit without the write-ahead
    file some recorders put in front of it. No write-ahead file, timer or replay is involved."""
    wait: Callable[[], Awaitable[bool]] = getattr(recorder, "committed", None) or recorder.flush_rows
    return await wait()


def navigate_answer(out: Path, i: int) -> dict[str, Any]:
    """A navigation's answer and the snapshot file it links, written as the worker would."""
    path = out / f"page-{i}.yml"
    path.write_text(SNAPSHOT)
    return {"content": [{"type": "text", "text": NAVIGATE.format(path=path)}]}


@dataclass
class CommitResult:
    tool: str
    callers: int  # conversations calling at once
    calls: int  # timed, all callers together
    p50_us: float  # what the answer waits for
    p95_us: float
    cpu_us_per_call: float  # the whole process: loop and writer thread
    commits_per_call: float
    read_p50_us: float  # Extracted.for_record: a linked snapshot read into the row, before the wait


async def _one(tool: str, calls: int, warmup: int, callers: int) -> CommitResult:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        recorder = Recorder(root / "router.db", layout=StateLayout(root))
        async with recorder.run():
            out = root / "out"
            out.mkdir()
            for c in range(callers):
                recorder.session_opened(
                    f"bench-{c}", client_info={"name": "bench"}, protocol_version=None, port=1, pid=1
                )
            await recorder.flush()
            per_caller = (warmup + calls) // callers
            total = per_caller * callers
            answers = [navigate_answer(out, i) if tool == "browser_navigate" else ANSWERS[tool] for i in range(total)]
            results = [json.dumps(a, separators=(",", ":")).encode() for a in answers]  # as the exchange encodes
            facts = [summarize(a) for a in answers]  # the exchange's, before the record's part
            waits: list[float] = []
            reads: list[float] = []

            async def caller(c: int) -> None:
                for k in range(per_caller):
                    i = c * per_caller + k
                    ref = f"ref-{i}"
                    recorder.request(ref, f"bench-{c}", "tools/call", tool, {"name": tool, "arguments": {}}, size=60)
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
                    if k >= warmup // callers:
                        waits.append(waited * 1e6)
                        reads.append(read * 1e6)
                    await asyncio.sleep(PAUSE_S)

            cpu0, batches0 = time.process_time(), recorder.stats().batches
            await asyncio.gather(*(caller(c) for c in range(callers)))
            await recorder.flush()
            cpu = time.process_time() - cpu0
            batches = recorder.stats().batches - batches0
    waits.sort()
    return CommitResult(
        tool, callers, len(waits), statistics.median(waits), waits[int(len(waits) * 0.95)], cpu * 1e6 / total,
        batches / total, statistics.median(reads),
    )


async def measure(calls: int = 500, warmup: int = 50, callers: tuple[int, ...] = (1, 20)) -> list[CommitResult]:
    return [await _one(tool, calls, warmup, n) for n in callers for tool in ANSWERS]


def table(results: list[CommitResult]) -> list[str]:
    return [
        f"### The commit: what a tool answer waits for before it leaves (in-process: the wait for its "
        f"call's rows to be committed; {PAUSE_S * 1000:.0f} ms between a conversation's calls)",
        "",
        "| answer | conversations at once | calls | the answer waits, p50 µs | p95 µs "
        "| reading its linked snapshot first, p50 µs | CPU µs per call (loop + writer thread) | commits per call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| `{r.tool}` | {r.callers} | {r.calls} | {r.p50_us:.0f} | {r.p95_us:.0f} | {r.read_p50_us:.0f} "
            f"| {r.cpu_us_per_call:.0f} | {r.commits_per_call:.2f} |"
            for r in results
        ),
    ]
