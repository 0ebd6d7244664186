"""Child process of test_write_ahead: one call committed, then one whose answer would have left
(write_ahead returned) before the router was SIGKILLed, ahead of its commit."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from router.record.recorder import Recorder

SNAPSHOT = "- button \"Press me\" [ref=e2]"
RESULT = '{"content":[{"type":"text","text":"### Snapshot\\n```yaml\\n' + SNAPSHOT.replace('"', '\\"') + '\\n```"}]}'


async def main(db_path: Path, out: Path) -> None:
    rec = Recorder(db_path)
    async with rec.run():
        rec.session_opened("s", client_info={"name": "kill"}, protocol_version="2025-06-18", port=1, pid=1)
        rec.request("c0", "s", "tools/call", "browser_snapshot", {"name": "browser_snapshot"})
        rec.response("c0", status="success", result=RESULT, page_snapshot=SNAPSHOT, duration_ms=1.0)
        assert await rec.write_ahead()
        rec.settle()
        assert await rec.flush()
        rec.session_resumed("s", "idle")
        rec.request("c1", "s", "tools/call", "browser_snapshot", {"name": "browser_snapshot"})
        rec.response("c1", status="success", result=RESULT, page_snapshot=SNAPSHOT,
                     console_logs=["[ERROR] boom @ http://x/:1"], duration_ms=2.0, output_dir=out)
        assert await rec.write_ahead()
        print("answered", flush=True)  # the answer leaves here; the commit would follow it
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
