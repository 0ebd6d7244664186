"""What the router tells every worker: its lock, its browser's origin lists, its sandbox, its node, its browser."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from router import settings as settings_module
from router.cli.main import main
from router.http.app import build_supervisor, handshake_fingerprint, router_origins
from router.settings import Settings, find_browser
from workers.node import node_executable
from workers.spec import ALLOWED_HOSTS_ENV, ALLOWED_ORIGINS_ENV, BLOCKED_ORIGINS_ENV
from workers.supervisor import Supervisor


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(state_dir=tmp_path, port=4123, **values)  # type: ignore[arg-type]


def test_the_browsers_never_reach_the_router_by_any_local_name(tmp_path: Path) -> None:
    blocked = build_supervisor(settings(tmp_path)).spec.env[BLOCKED_ORIGINS_ENV].split(";")
    for origin in ("http://127.0.0.1:4123", "http://localhost:4123", "http://[::1]:4123", "http://0.0.0.0:4123"):
        assert origin in blocked
    assert "http://10.1.2.3:4123" in router_origins("10.1.2.3", 4123)
    assert "http://[fd00::1]:4123" in router_origins("fd00::1", 4123)
    assert ALLOWED_ORIGINS_ENV not in build_supervisor(settings(tmp_path)).spec.env


def test_browse_policy_goes_to_every_worker(tmp_path: Path) -> None:
    spec = build_supervisor(
        settings(tmp_path, browse_allow=["https://a.example", "https://b.example"], browse_block=["https://c.example"])
    ).spec
    assert spec.env[ALLOWED_ORIGINS_ENV] == "https://a.example;https://b.example"
    blocked = spec.env[BLOCKED_ORIGINS_ENV].split(";")
    assert "https://c.example" in blocked and "http://127.0.0.1:4123" in blocked


def test_browse_flags_are_repeatable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[Settings] = []
    monkeypatch.setattr(sys.modules["router.cli.main"], "serve", lambda s: seen.append(s) or 0)
    argv = ["serve", "--state-dir", str(tmp_path), "--browse-allow", "https://a.example",
            "--browse-allow", "https://b.example", "--browse-block", "https://c.example", "--auth", "none"]  # fmt: skip
    assert main(argv) == 0
    (s,) = seen
    assert s.browse_allow == ["https://a.example", "https://b.example"]
    assert s.browse_block == ["https://c.example"] and s.auth == "none"


def test_only_the_builtin_worker_is_locked(tmp_path: Path) -> None:
    assert build_supervisor(settings(tmp_path)).spec.allowed_hosts_env == ALLOWED_HOSTS_ENV
    custom = build_supervisor(settings(tmp_path, worker_command=["python", "server.py", "{port}"]))
    assert custom.spec.allowed_hosts_env is None
    assert BLOCKED_ORIGINS_ENV in custom.spec.env  # harmless to others, useful to a custom @playwright/mcp


def test_the_sandbox_is_on_unless_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--sandbox" in build_supervisor(settings(tmp_path)).spec.argv_template
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert "--sandbox" not in build_supervisor(settings(tmp_path)).spec.argv_template


def test_the_worker_runs_the_pinned_node_and_its_fingerprint_follows_the_node_not_the_state_dir(
    tmp_path: Path,
) -> None:
    first, second = build_supervisor(settings(tmp_path / "a")), build_supervisor(settings(tmp_path / "b"))
    assert first.spec.argv_template[0] == node_executable()
    # Every worker's NODE_COMPILE_CACHE is in its state dir, but not in the handshake cache's key.
    assert handshake_fingerprint(first) == handshake_fingerprint(second)
    other_node = Supervisor(
        spec=replace(first.spec, argv_template=("/opt/node-23/bin/node", *first.spec.argv_template[1:])),
        state_dir=first.state_dir,
        browser=first.browser,
        cli=first.cli,
    )
    assert handshake_fingerprint(other_node) != handshake_fingerprint(first)


def fake_browsers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, shell: bool, on_path: tuple[str, ...]) -> Path:
    """A machine with a headless shell at its Debian place (or not) and these names on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in on_path:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    lib_shell = tmp_path / "lib" / "chromium-headless-shell"
    if shell:
        lib_shell.parent.mkdir()
        lib_shell.write_text("#!/bin/sh\n")
        lib_shell.chmod(0o755)
    monkeypatch.setattr(settings_module, "HEADLESS_SHELLS", (lib_shell,))
    monkeypatch.setattr(settings_module, "DEBIAN_CHROMIUM", tmp_path / "absent")
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_headless_workers_run_the_headless_shell_where_there_is_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bin_dir = fake_browsers(monkeypatch, tmp_path, shell=True, on_path=("chromium",))
    assert find_browser() == str(tmp_path / "lib" / "chromium-headless-shell")
    assert settings(tmp_path, browser=None).browser_path() == str(tmp_path / "lib" / "chromium-headless-shell")
    # Headed, a headless shell cannot show a window: the full Chromium.
    assert settings(tmp_path, browser=None, headless=False).browser_path() == str(bin_dir / "chromium")
    # The operator's choice wins.
    assert settings(tmp_path, browser="/opt/chrome").browser_path() == "/opt/chrome"


def test_a_headless_shell_on_path_counts_and_without_one_the_full_chromium_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bin_dir = fake_browsers(monkeypatch, tmp_path, shell=False, on_path=("chromium", "chromium-headless-shell"))
    assert find_browser() == str(bin_dir / "chromium-headless-shell")
    (bin_dir / "chromium-headless-shell").unlink()
    assert find_browser() == str(bin_dir / "chromium")
    (bin_dir / "chromium").unlink()
    assert find_browser() is None
