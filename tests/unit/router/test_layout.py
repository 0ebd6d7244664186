"""StateLayout names every path under the state dir; workers/ (which must not import the router)
computes its own paths, and the two must agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.layout import StateLayout
from workers import node, orphans
from workers.spec import WorkerSpec
from workers.supervisor import Supervisor

SID = "AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def test_paths_under_the_state_dir(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    assert layout.db == tmp_path / "router.db"
    assert layout.router_file == tmp_path / "router.json"
    assert layout.session_dir(SID) == tmp_path / "sessions" / SID
    assert layout.output_dir(SID) == tmp_path / "sessions" / SID / "out"
    assert layout.profile_dir(SID) == tmp_path / "sessions" / SID / "profile"
    assert layout.state_file(SID) == tmp_path / "sessions" / SID / "state.json"
    assert layout.files_dir("6f1c7a52-0000-4000-8000-000000000001") == (
        tmp_path / "files" / "6f1c7a52-0000-4000-8000-000000000001"
    )


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", "", ".hidden", "x" * 200, "a\x00b"])
def test_names_that_would_leave_their_directory_are_refused(tmp_path: Path, bad: str) -> None:
    layout = StateLayout(tmp_path)
    with pytest.raises(ValueError):
        layout.session_dir(bad)
    with pytest.raises(ValueError):
        layout.files_dir(bad)


def test_workers_paths_agree_with_the_layout(tmp_path: Path) -> None:
    supervisor = Supervisor(
        spec=WorkerSpec(argv_template=("true",)), state_dir=tmp_path, browser="chromium", cli="cli.js"
    )
    layout = StateLayout(supervisor.state_dir)
    assert supervisor.session_dir(SID) == layout.session_dir(SID)
    assert supervisor.output_dir(SID) == layout.output_dir(SID)
    assert supervisor.profile_dir(SID) == layout.profile_dir(SID)
    assert orphans.pid_file(supervisor.state_dir, SID).parent == layout.workers_dir
    assert node.compile_cache_dir(supervisor.state_dir) == layout.node_compile_cache
