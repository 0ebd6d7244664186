from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from workers.node import node_executable
from workers.spec import (
    ALLOWED_HOSTS_ENV,
    ALLOWED_ORIGINS_ENV,
    BLOCKED_ORIGINS_ENV,
    WorkerSpec,
    browse_env,
    default_cli_path,
    new_host_name,
    playwright_argv,
    sandbox_possible,
)


def test_default_template() -> None:
    argv = playwright_argv(node="node")
    assert argv == (
        "node", "{cli}", "--port", "{port}", "--host", "127.0.0.1", "--headless",
        "--browser", "chromium", "--executable-path", "{browser}",
        "--user-data-dir", "{profile_dir}", "--shared-browser-context",
        "--output-dir", "{output_dir}", "--caps", "storage,network", "--file-paths", "absolute",
    )  # fmt: skip


def test_isolated_template_shares_one_browser_and_no_profile() -> None:
    argv = playwright_argv(node="node", isolated=True)
    assert argv[argv.index("{browser}") + 1 : argv.index("--output-dir")] == ("--isolated",)
    assert "{profile_dir}" not in argv
    assert "--shared-browser-context" not in argv
    assert "--isolated" not in playwright_argv(node="node")


@pytest.mark.parametrize(
    ("extra", "caps", "rest"),
    [
        (["--caps", "vision"], "storage,network,vision", []),
        (["--caps=pdf, storage", "--isolated", "--caps", "vision,pdf"], "storage,network,pdf,vision", ["--isolated"]),
        (["--no-sandbox"], "storage,network", ["--no-sandbox"]),
    ],
)
def test_the_users_caps_join_the_routers(extra: list[str], caps: str, rest: list[str]) -> None:
    # The worker keeps only the last --caps: the user's alone would drop the router's storage.
    argv = playwright_argv(node="node", extra_args=extra)
    assert [a for a in argv if a.startswith("--caps")] == ["--caps"]
    assert argv[argv.index("--caps") + 1] == caps
    assert list(argv[argv.index("--file-paths") + 2 :]) == rest


def test_default_template_runs_the_pinned_node_when_installed() -> None:
    assert playwright_argv()[0] == node_executable()
    assert playwright_argv(node="/opt/node/bin/node")[0] == "/opt/node/bin/node"


def test_headed_viewport_and_extra() -> None:
    argv = playwright_argv(headless=False, viewport="1280x720", extra_args=["--foo", "bar"])
    assert "--headless" not in argv
    assert argv[-4:] == ("--viewport-size", "1280x720", "--foo", "bar")


def test_render_substitutes_only_known_tokens() -> None:
    spec = WorkerSpec(argv_template=("x", "--port={port}", "{cli}", '{"json": {port}}', "{other}"))
    out = spec.render(port=123, output_dir=Path("/o"), profile_dir=Path("/p"), browser="/b", cli="/c.js")
    assert out == ["x", "--port=123", "/c.js", '{"json": 123}', "{other}"]


def test_spec_defaults() -> None:
    spec = WorkerSpec()
    assert spec.argv_template == playwright_argv()
    assert spec.ready_timeout == 15.0
    assert spec.stop_grace == 2.0
    assert dict(spec.env) == {}


def test_default_cli_path_is_the_pinned_install() -> None:
    path = default_cli_path()
    assert path.parts[-4:] == ("node_modules", "@playwright", "mcp", "cli.js")
    assert path.is_file()


def test_sandbox_flag_comes_before_extra_args_so_no_sandbox_there_wins() -> None:
    assert "--sandbox" not in playwright_argv()
    argv = playwright_argv(sandbox=True, extra_args=["--no-sandbox"])
    assert argv.index("--sandbox") < argv.index("--no-sandbox")


def test_sandbox_is_possible_for_everyone_but_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert not sandbox_possible()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert sandbox_possible()


def test_browse_env_uses_the_workers_separator() -> None:
    assert browse_env() == {}
    env = browse_env(allow=["https://a.example", " "], block=["http://127.0.0.1:4000", "http://[::1]:4000"])
    assert env == {
        ALLOWED_ORIGINS_ENV: "https://a.example",
        BLOCKED_ORIGINS_ENV: "http://127.0.0.1:4000;http://[::1]:4000",
    }


def test_host_names_are_secret_and_valid_labels() -> None:
    names = {new_host_name() for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert re.fullmatch(r"w-[0-9a-f]{32}", name)  # 128 bits, a DNS label (<= 63 chars)


def test_the_lock_is_off_unless_asked_for() -> None:
    assert WorkerSpec().allowed_hosts_env is None
    assert ALLOWED_HOSTS_ENV == "PLAYWRIGHT_MCP_ALLOWED_HOSTS"
