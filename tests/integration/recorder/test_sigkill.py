from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from router.record import schema

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("sigkill_child.py")


def test_sigkill_mid_traffic_loses_no_acknowledged_row(tmp_path: Path) -> None:
    db = tmp_path / "router.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(CHILD), str(db)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    acknowledged = []
    try:
        for line in proc.stdout:
            acknowledged.append(line.strip())
            if len(acknowledged) == 300:
                proc.send_signal(signal.SIGKILL)
                break
        # Lines already printed before the kill landed were acknowledged too.
        acknowledged += [line.strip() for line in proc.stdout if line.strip()]
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert len(acknowledged) >= 300

    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert schema.user_version(conn) == schema.SCHEMA_VERSION
        stored_req = {r[0] for r in conn.execute("SELECT ref_id FROM requests WHERE session_id = 'main'")}
        stored_resp = {r[0] for r in conn.execute("SELECT ref_id FROM responses WHERE ref_id LIKE 'main-%'")}
        missing = [ref for ref in acknowledged if ref not in stored_req or ref not in stored_resp]
        assert missing == []
        noise = conn.execute("SELECT count(*) FROM responses WHERE ref_id LIKE 'noise%'").fetchone()[0]
        assert noise > 0  # the kill really happened mid-traffic
        # Every response row is whole: snapshot stored together with its row, never half.
        assert conn.execute("SELECT count(*) FROM responses WHERE length(page_snapshot) != ?",
                            (len(conn.execute("SELECT page_snapshot FROM responses LIMIT 1").fetchone()[0]),)
                            ).fetchone()[0] == 0
    finally:
        conn.close()
    # The file opens cleanly for the next run too (WAL recovery, migrations no-op).
    schema.connect(db).close()
