"""`mcp-router service`: the unit it writes passes `systemd-analyze verify` and carries the options."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from router.cli.service_unit import UNIT_NAME
from router.settings import Settings
from tests.support import ROOT

CLI_TIMEOUT = 60.0
PORT = 4123


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment whose HOME, config and runtime dirs are empty temporary ones: nothing real
    is touched, and no systemd user manager is reachable (its bus would live in XDG_RUNTIME_DIR)."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env |= {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_RUNTIME_DIR": str(runtime), "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    return env


def service(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "router.cli", "service", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


def verify(unit: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing: scripts/setup --test installs Debian's systemd package"
    return subprocess.run([analyze, "--user", "verify", str(unit)], env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, check=False)


def installed_unit(env: dict[str, str]) -> Path:
    return Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user" / UNIT_NAME


def test_install_writes_a_unit_that_verifies(home: dict[str, str]) -> None:
    done = service(home, "install", "--port", str(PORT), "--worker-arg=--caps", "--worker-arg", "storage", "--headed")
    assert done.returncode == 0, done.stderr
    unit = installed_unit(home)
    text = unit.read_text()
    assert f"WorkingDirectory={ROOT}" in text
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert Path(shlex.split(exec_start.removeprefix("ExecStart="))[0]).is_file()
    # No user manager here: it says what to run instead of running it.
    assert "systemctl --user daemon-reload" in done.stdout
    assert "systemctl --user enable --now mcp-router" in done.stdout
    assert f"claude mcp add --transport http browser http://127.0.0.1:{PORT}/mcp" in done.stdout
    (stdio_line,) = [line for line in done.stdout.splitlines() if "claude mcp add browser -- " in line]
    assert stdio_line.strip().endswith(f"stdio --port {PORT}")
    assert Path(shlex.split(stdio_line)[5]).is_file()  # an absolute path: a client's PATH may lack .venv/bin

    checked = verify(unit, home)
    assert checked.returncode == 0, checked.stderr
    assert UNIT_NAME not in checked.stdout + checked.stderr  # not even a warning about it


def test_the_units_options_are_the_flags_given(home: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert service(home, "install", "--port", str(PORT), "--worker-arg=--caps", "--worker-arg", "storage",
                   "--headed", "--deny-tool", "browser_evaluate").returncode == 0
    for line in installed_unit(home).read_text().splitlines():
        if line.startswith("Environment="):
            key, _, value = shlex.split(line.removeprefix("Environment="))[0].partition("=")
            monkeypatch.setenv(key, value)
    settings = Settings()  # what the service's router reads from the environment the unit gives it
    assert settings.port == PORT
    assert settings.worker_args == ["--caps", "storage"]
    assert settings.headless is False
    assert settings.deny_tools == ["browser_evaluate"]


def test_a_broken_unit_fails_verify(home: dict[str, str]) -> None:
    assert service(home, "install").returncode == 0
    unit = installed_unit(home)
    broken = unit.with_name("broken.service")
    broken.write_text(unit.read_text().replace("ExecStart=", "ExecStart=/nonexistent/mcp-router # "))
    assert verify(broken, home).returncode != 0


def test_status_and_uninstall(home: dict[str, str]) -> None:
    assert service(home, "install").returncode == 0
    wants = installed_unit(home).parent / "default.target.wants" / UNIT_NAME
    wants.parent.mkdir()
    wants.symlink_to(installed_unit(home))  # as `systemctl --user enable` would have left it
    status = service(home, "status")
    assert status.returncode == 0 and "installed" in status.stdout and "not installed" not in status.stdout
    removed = service(home, "uninstall")
    assert removed.returncode == 0, removed.stderr
    assert not installed_unit(home).exists() and not wants.is_symlink()
    assert "systemctl --user stop mcp-router" in removed.stdout
    assert "not installed" in service(home, "status").stdout
