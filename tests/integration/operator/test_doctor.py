"""`mcp-router doctor`: ✓ on a healthy machine, ✗ with the fix on a broken one, and the exit status."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.cli import doctor, main
from router.http.auth import load_or_create_token
from router.record import schema
from tests.support import RouterThread, router_settings, spare_port


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port held by something that is not a router."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def run_doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    status = main(["doctor", *args])
    return status, capsys.readouterr().out.splitlines()


def test_an_uninstalled_unit_is_a_hint_not_a_failure(
    tmp_path: Path, config_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCP_ROUTER_BROWSER", raising=False)
    status, lines = run_doctor(capsys, "--state-dir", str(tmp_path / "new"), "--port", str(spare_port()))
    assert status == 0, lines
    assert lines[-1] == "all checks passed"
    (unit,) = [line for line in lines if "systemd user unit not installed" in line]
    assert unit.startswith("! ") and "mcp-router service install" in unit
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700  # doctor makes it as serve would


def test_loose_modes_fail_with_the_chmod(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    loose = doctor.check_private_state(tmp_path)
    assert not loose.ok and "readable by others (mode 755)" in loose.message and f"chmod 700 {tmp_path}" in loose.fix
    tmp_path.chmod(0o700)
    assert doctor.check_private_state(tmp_path).ok
    assert doctor.check_private_state(tmp_path / "absent").ok
    assert doctor.check_token(tmp_path, "token").ok  # none yet: made on first start
    load_or_create_token(tmp_path)
    assert doctor.check_token(tmp_path, "token").ok
    (tmp_path / "token").chmod(0o644)
    token = doctor.check_token(tmp_path, "token")
    assert not token.ok and "chmod 600" in token.fix
    (tmp_path / "token").write_text("short\n")
    assert not doctor.check_token(tmp_path, "token").ok
    off = doctor.check_token(tmp_path, "none")
    assert off.ok and off.warning and "auth is off" in off.message


def test_the_sandbox_is_a_hint_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    root = doctor.check_sandbox()
    assert root.ok and root.warning and "root" in root.message and root.line().startswith("!")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    user = doctor.check_sandbox()
    assert user.ok and not user.warning and "sandbox is on" in user.message


def test_broken_machine_fails_with_fixes(
    tmp_path: Path, config_home: Path, busy_port: int, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no node
    monkeypatch.setenv("MCP_ROUTER_BROWSER", "/bin/false")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    status, lines = run_doctor(capsys, "--state-dir", str(blocker / "state"), "--port", str(busy_port))
    assert status == 1
    failed = [line for line in lines if line.startswith("✗")]
    assert all(" — fix: " in line for line in failed)
    text = "\n".join(failed)
    assert "node not found on PATH" in text
    assert "browser /bin/false does not launch headless" in text
    assert "is not writable" in text
    assert f"port 127.0.0.1:{busy_port} is not available" in text
    assert "systemd user unit not installed" not in text  # a hint, on a "!" line
    assert lines[-1] == "4 problem(s) found"


def test_port_held_by_a_router_is_fine(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir)) as router:
        check = doctor.check_port("127.0.0.1", router.port)
    assert check.ok and "a router already answers" in check.message


def test_worker_package_version_must_match_the_pin(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(json.dumps({"dependencies": {"@playwright/mcp": "0.0.83"}}))
    assert not doctor.check_worker_package(tmp_path).ok  # not installed
    installed = tmp_path / "node_modules" / "@playwright" / "mcp"
    installed.mkdir(parents=True)
    (installed / "package.json").write_text(json.dumps({"version": "0.0.80"}))
    check = doctor.check_worker_package(tmp_path)
    assert not check.ok and "0.0.80 installed, 0.0.83 pinned" in check.message and "npm ci" in check.fix
    (installed / "package.json").write_text(json.dumps({"version": "0.0.83"}))
    assert doctor.check_worker_package(tmp_path).ok


def test_database_checks(tmp_path: Path) -> None:
    assert doctor.check_database(tmp_path).ok  # none yet: created on first start
    (tmp_path / "router.db").write_bytes(b"this is not a database" * 100)
    broken = doctor.check_database(tmp_path)
    assert not broken.ok and "does not open" in broken.message
    (tmp_path / "router.db").unlink()
    conn = sqlite3.connect(tmp_path / "router.db")
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    conn.close()
    newer = doctor.check_database(tmp_path)
    assert not newer.ok and "newer than this router" in newer.message


def test_old_node_warns_and_too_old_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "node"
    monkeypatch.setenv("PATH", str(tmp_path))
    for version, ok, warning in (("v18.19.0", True, True), ("v16.20.2", False, False), ("v22.1.0", True, False)):
        fake.write_text(f"#!/bin/sh\necho {version}\n")
        fake.chmod(0o755)
        check = doctor.check_node()
        assert (check.ok, check.warning) == (ok, warning), check
        assert check.line().startswith("!" if warning else "✓" if ok else "✗")


def test_doctor_tells_whether_a_router_holds_the_state_dir(tmp_path: Path) -> None:
    from router.cli.doctor import check_state_lock
    from router.state_lock import StateLock

    assert "no router holds" in check_state_lock(tmp_path).message
    with StateLock(tmp_path):
        held = check_state_lock(tmp_path)
        assert held.ok and held.warning and f"pid {os.getpid()}" in held.message
    assert "no router holds" in check_state_lock(tmp_path).message
