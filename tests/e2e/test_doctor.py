"""The doctor on a healthy machine: it finds the real browser and launches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.http.auth import load_or_create_token
from router.record import schema
from tests.integration.operator.test_doctor import config_home, run_doctor
from tests.support import spare_port

__all__ = ["config_home"]


def test_healthy_machine_passes(
    tmp_path: Path, config_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    chromium: str,
) -> None:
    monkeypatch.delenv("MCP_ROUTER_BROWSER", raising=False)  # the doctor finds the browser and launches it
    unit = config_home / "systemd" / "user" / "mcp-router.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n")
    state = tmp_path / "state"
    conn = schema.connect(state / "router.db")
    conn.close()
    state.chmod(0o700)
    load_or_create_token(state)
    status, lines = run_doctor(capsys, "--state-dir", str(state), "--port", str(spare_port()))
    assert status == 0, lines
    assert len(lines) == 13 and lines[-1] == "all checks passed"
    assert all(line.startswith(("✓", "!")) for line in lines[:-1]), lines
    text = "\n".join(lines)
    for expected in ("node v", "@playwright/mcp 0.0.83 installed", "launches headless", "is writable",
                     f"schema v{schema.SCHEMA_VERSION}", "is free", "systemd user unit installed",
                     "sandbox", f"state dir {state} is private (700)", "is private (600)",
                     "more sessions with a browser each"):
        assert expected in text
