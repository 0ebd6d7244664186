"""The handshake cache answers only for the worker it was filled from.

Its key is a fingerprint of the worker (argv, environment, the bytes of the files it names): any
change gives a new key, so a changed worker is probed again instead of served a stale answer.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, Final

import pytest

from router import json_files
from router.catalog.answers import Catalog
from router.sessions.handshake import CACHE_DIR, HandshakeCache, worker_fingerprint
from tests.support import FAKE_WORKER, RawClient, RouterThread, messages_of, router_settings, wait_for
from workers.orphans import processes_for

VERSION: Final = "2025-06-18"
INITIALIZE: Final = {"protocolVersion": VERSION, "capabilities": {"tools": {}}, "serverInfo": {"name": "w"}}
TOOLS: Final = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
ADDED_TOOL: Final = """

@server.tool()
def added_later() -> str:
    return "new"
"""


def fingerprint(argv: list[str], env: dict[str, str] | None = None, files: list[Path] | None = None) -> str:
    return worker_fingerprint(argv, env or {}, files or [])


# -- worker_fingerprint ----------------------------------------------------------------------------


def test_fingerprint_is_stable_for_the_same_worker(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text("print('hi')\n")
    argv = ["python", str(script), "{port}"]
    assert fingerprint(argv, {"A": "1"}, [script]) == fingerprint(list(argv), {"A": "1"}, [script])
    # The environment is a mapping: its order is not part of the worker.
    assert worker_fingerprint(argv, {"A": "1", "B": "2"}, []) == worker_fingerprint(argv, {"B": "2", "A": "1"}, [])


def test_fingerprint_changes_with_a_flag_an_env_var_or_a_named_files_bytes(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text("print('hi')\n")
    argv = ["node", "{cli}", "--port", "{port}"]
    base = fingerprint(argv, {"A": "1"}, [script])
    assert fingerprint([*argv, "--caps=vision"], {"A": "1"}, [script]) != base
    assert fingerprint(argv, {"A": "2"}, [script]) != base
    assert fingerprint(argv, {"A": "1", "B": "1"}, [script]) != base
    script.write_text("print('hi there')\n")
    assert fingerprint(argv, {"A": "1"}, [script]) != base
    # A named file that went missing is a change too.
    script.unlink()
    assert fingerprint(argv, {"A": "1"}, [script]) != base


# -- HandshakeCache --------------------------------------------------------------------------------


def test_store_then_get_survives_a_new_instance(tmp_path: Path) -> None:
    cache = HandshakeCache(tmp_path, "a" * 64)
    assert cache.get(VERSION) is None and cache.versions() == set()
    cache.store(VERSION, dict(INITIALIZE), dict(TOOLS))
    assert cache.path.parent == tmp_path / CACHE_DIR
    again = HandshakeCache(tmp_path, "a" * 64)
    assert again.get(VERSION) == {"initialize": INITIALIZE, "tools": TOOLS}
    assert again.versions() == {VERSION}
    assert again.get("2024-11-05") is None


def test_get_hands_out_a_copy(tmp_path: Path) -> None:
    """Answers built from an entry are changed on their way out; the entry must not be."""
    cache = HandshakeCache(tmp_path, "a" * 64)
    cache.store(VERSION, dict(INITIALIZE), {"tools": list(TOOLS["tools"])})
    entry = cache.get(VERSION)
    assert entry is not None
    entry["tools"]["tools"].append({"name": "get_content"})
    entry["initialize"]["serverInfo"]["name"] = "changed"
    assert cache.get(VERSION) == {"initialize": INITIALIZE, "tools": TOOLS}


def test_read_only_tools_are_the_ones_the_worker_marks(tmp_path: Path) -> None:
    """What decides whether a call is followed by a save of the browser state."""
    cache = HandshakeCache(tmp_path, "a" * 64)
    assert not cache.read_only("browser_snapshot")  # nothing cached: every tool may change state
    tools = [
        {"name": "browser_snapshot", "annotations": {"readOnlyHint": True}},
        {"name": "browser_navigate", "annotations": {"readOnlyHint": False}},
        {"name": "browser_tabs"},
        {"name": "odd", "annotations": ["readOnlyHint"]},
    ]
    cache.store(VERSION, dict(INITIALIZE), {"tools": tools})
    assert cache.read_only("browser_snapshot")
    assert not any(cache.read_only(t) for t in ("browser_navigate", "browser_tabs", "odd", "unknown"))
    cache.store(VERSION, dict(INITIALIZE), {"tools": [{"name": "browser_snapshot"}]})  # a new worker build
    assert not cache.read_only("browser_snapshot")


def test_an_entry_is_not_served_under_another_fingerprint(tmp_path: Path) -> None:
    HandshakeCache(tmp_path, "a" * 64).store(VERSION, dict(INITIALIZE), dict(TOOLS))
    assert HandshakeCache(tmp_path, "b" * 64).get(VERSION) is None
    # Even where two fingerprints share the file name, the one written inside decides.
    same_file = HandshakeCache(tmp_path, "a" * 32 + "c" * 32)
    assert same_file.path == HandshakeCache(tmp_path, "a" * 64).path
    assert same_file.get(VERSION) is None


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        "[1, 2]",
        json.dumps({"fingerprint": "f" * 64, "versions": "nope"}),
        # An entry without its tools/list answer cannot answer tools/list: not served.
        json.dumps({"fingerprint": "f" * 64, "versions": {VERSION: {"initialize": INITIALIZE}}}),
        json.dumps({"fingerprint": "f" * 64, "versions": {VERSION: {"initialize": INITIALIZE, "tools": {}}}}),
    ],
)
def test_a_corrupt_cache_file_is_ignored_and_rewritten(tmp_path: Path, content: str) -> None:
    cache = HandshakeCache(tmp_path, "f" * 64)
    cache.path.parent.mkdir(parents=True)
    cache.path.write_text(content)
    assert cache.get(VERSION) is None
    assert cache.versions() == set()
    cache.store(VERSION, dict(INITIALIZE), dict(TOOLS))
    assert HandshakeCache(tmp_path, "f" * 64).get(VERSION) == {"initialize": INITIALIZE, "tools": TOOLS}


def test_store_replaces_the_file_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = HandshakeCache(tmp_path, "a" * 64)
    cache.store(VERSION, dict(INITIALIZE), dict(TOOLS))
    before = cache.path.read_bytes()
    assert [p.name for p in cache.path.parent.iterdir()] == [cache.path.name], "no temporary file left"

    def refuse(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(json_files.os, "replace", refuse)
    other = {"tools": [{"name": "other", "inputSchema": {"type": "object"}}]}
    cache.store("2025-11-25", dict(INITIALIZE), other)  # logged, not raised: the cache is an optimisation
    assert cache.path.read_bytes() == before, "a failed write leaves the previous file whole"
    assert [p.name for p in cache.path.parent.iterdir()] == [cache.path.name]
    assert cache.get("2025-11-25") == {"initialize": INITIALIZE, "tools": other}  # memory still has it
    monkeypatch.undo()
    assert HandshakeCache(tmp_path, "a" * 64).versions() == {VERSION}


# -- through a router ------------------------------------------------------------------------------


def listed_names(router: RouterThread) -> tuple[set[str], str]:
    with RawClient(router.url) as c:
        c.initialize(version=VERSION)
        names = {t["name"] for t in c.request("tools/list")["result"]["tools"]}
        assert not processes_for(Path(router.settings.state_dir), c.session_id), "listed from the cache"
        assert c.delete().status_code == 200
    return names, c.session_id or ""


def test_a_changed_worker_script_is_probed_again_not_served_stale(tmp_path: Path, state_dir: Path) -> None:
    script = tmp_path / "worker.py"
    shutil.copy(FAKE_WORKER, script)
    command = [sys.executable, str(script), "{port}"]
    settings = router_settings(state_dir, worker_command=command)
    with RouterThread(settings) as router:
        names, _ = listed_names(router)
    assert "echo" in names and "added_later" not in names
    cached = list((state_dir / CACHE_DIR).glob("handshake-*.json"))
    assert len(cached) == 1, "the first run fills the cache on disk"

    source = script.read_text()
    marker = '\nif __name__ == "__main__":'
    assert marker in source
    script.write_text(source.replace(marker, ADDED_TOOL + "\n" + marker, 1))
    with RouterThread(router_settings(state_dir, worker_command=command)) as router:
        names, _ = listed_names(router)
    assert "added_later" in names, "a changed worker is not served the old worker's tools"
    assert set((state_dir / CACHE_DIR).glob("handshake-*.json")) - set(cached), "filled under the new key"


def test_a_version_missing_from_the_cache_starts_a_worker_and_fills_it(state_dir: Path) -> None:
    router = RouterThread(router_settings(state_dir))
    # No probe: the cache stays empty until a session's worker fills it.
    router.manager.probe_handshake = False
    with router, RawClient(router.url) as c:
        response = c.initialize(version=VERSION)
        result = messages_of(response)[-1]["result"]
        assert result["protocolVersion"] == VERSION
        assert result["serverInfo"]["name"] == "fake-worker"
        assert processes_for(state_dir, c.session_id), "nothing cached for this version: a worker answered"
        # The first spawn fills the cache, and the next handshake of that version is lazy.
        wait_for(lambda: router.manager.handshakes.get(VERSION) is not None, timeout=10)
        assert Catalog.with_capabilities(router.manager.handshakes.get(VERSION)["initialize"]) == result
        assert "echo" in c.text("echo", text="echo")
        names, _ = listed_names(router)
        assert "echo" in names and "get_content" in names
        assert c.delete().status_code == 200
