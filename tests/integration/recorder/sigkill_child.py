"""Child process of test_sigkill: records traffic and prints each ref_id once committed()
returned, i.e. once the router would have let the answer reach the client. Killed with SIGKILL mid-traffic."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from router.record.recorder import Recorder

SNAPSHOT = "\n".join(f"  - listitem [ref=e{i}]: item number {i}" for i in range(200))
RESULT = json.dumps({"content": [{"type": "text", "text": "### Snapshot\n```yaml\n" + SNAPSHOT + "\n```"}]})


async def noise(rec: Recorder, session_id: str) -> None:
    """Unflushed traffic of other sessions, so the kill lands among batches of every size."""
    i = 0
    while True:
        ref = f"{session_id}-{i}"
        rec.request(ref, session_id, "tools/call", "browser_snapshot", {"i": i})
        rec.response(ref, status="success", result=RESULT, page_snapshot=SNAPSHOT,
                     console_logs=["[ERROR] boom @ http://x/:1"], duration_ms=1.0)
        i += 1
        if i % 5 == 0:
            await rec.flush()  # keeps the backlog bounded so main's flushes stay fast


async def main(db_path: Path) -> None:
    rec = Recorder(db_path, queue_max=1_000_000)
    async with rec.run():
        rec.session_opened("main", client_info={"name": "kill"}, protocol_version="2025-06-18", port=1, pid=1)
        tasks = [asyncio.create_task(noise(rec, f"noise{n}")) for n in range(3)]
        i = 0
        while True:
            ref = f"main-{i}"
            rec.request(ref, "main", "tools/call", "browser_snapshot", {"i": i})
            rec.response(ref, status="success", result=RESULT, page_snapshot=SNAPSHOT, duration_ms=1.0)
            await rec.committed()  # what a tool answer waits for; it leaves either way
            print(ref, flush=True)
            i += 1
        del tasks


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
