"""What the CLI's helpers load, seen from a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_helpers_do_not_import_the_server_side() -> None:
    """`mcp-router sessions --end` must not load the session manager or the supervisor."""
    code = "import sys, router.cli.admin; print(sorted(m for m in sys.modules if m.startswith(('router', 'workers'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "router.sessions.manager" not in out
    assert "workers.supervisor" not in out
