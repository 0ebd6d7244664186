from __future__ import annotations

from pathlib import Path

from workers.spec import WorkerSpec, default_cli_path, playwright_argv


def test_default_template() -> None:
    argv = playwright_argv()
    assert argv == (
        "node", "{cli}", "--port", "{port}", "--host", "127.0.0.1", "--headless",
        "--browser", "chromium", "--executable-path", "{browser}",
        "--user-data-dir", "{profile_dir}", "--shared-browser-context",
        "--output-dir", "{output_dir}", "--caps", "storage", "--file-paths", "absolute",
    )  # fmt: skip


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
