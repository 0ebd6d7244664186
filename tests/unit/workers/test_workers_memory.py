"""workers.memory against fake /proc and cgroup trees: the lowest of meminfo and every cgroup level."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.sessions.bringup import RESERVE_FREE_FLOOR, WARM_WORKER_BYTES, room_for_another_warm_worker
from router.settings import WORKER_MEMORY_BYTES, Settings, default_max_live_workers
from workers.memory import Memory

GIB = 1024**3
MIB = 1024**2
MEMINFO_ONLY = (16 * GIB, 12 * GIB)  # the fake meminfo's MemTotal and MemAvailable
V1_UNLIMITED_READING = 9223372036854771712  # what an unlimited v1 group reports (LONG_MAX, page-rounded)


class Tree:
    """A fake /proc and /sys/fs/cgroup under tmp_path."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.cgroup_fs = root / "cgroup"
        (self.proc / "self").mkdir(parents=True)
        self.cgroup_fs.mkdir()

    def memory(self) -> Memory:
        return Memory(self.proc, self.cgroup_fs)

    def figures(self) -> tuple[int | None, int | None]:
        memory = self.memory()
        return memory.total(), memory.available()

    def meminfo(self, *, total: int, available: int) -> None:
        (self.proc / "meminfo").write_text(
            f"MemTotal:       {total // 1024} kB\nMemFree:        1234 kB\nMemAvailable:   {available // 1024} kB\n"
        )

    def own_cgroup(self, text: str) -> None:
        (self.proc / "self" / "cgroup").write_text(text)

    def level(self, relative: str, **files: str | int) -> None:
        """Files of one cgroup directory: keyword names with "_" for "." (memory_max)."""
        directory = self.cgroup_fs / relative
        directory.mkdir(parents=True, exist_ok=True)
        for name, value in files.items():
            (directory / name.replace("_", ".", 1)).write_text(f"{value}\n")


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    t = Tree(tmp_path)
    t.meminfo(total=MEMINFO_ONLY[0], available=MEMINFO_ONLY[1])
    return t


def test_meminfo_alone_where_no_cgroup_limits(tree: Tree) -> None:
    tree.own_cgroup("0::/user.slice/session-1.scope\n")
    assert tree.figures() == MEMINFO_ONLY


def test_a_v2_limit_tighter_than_meminfo_wins(tree: Tree) -> None:
    unit = "system.slice/mcp-router.service"
    tree.own_cgroup(f"0::/{unit}\n")
    stat = f"anon 123\ninactive_file {512 * MIB}\nactive_file 1\n"
    tree.level(unit, memory_max=4 * GIB, memory_current=3 * GIB, memory_stat=stat)
    # available: 4 GiB - (3 GiB used - 0.5 GiB of reclaimable cache)
    assert tree.figures() == (4 * GIB, GIB + 512 * MIB)


def test_inactive_file_counts_as_reclaimable(tree: Tree) -> None:
    tree.own_cgroup("0::/box\n")
    tree.level("box", memory_max=4 * GIB, memory_current=4 * GIB, memory_stat=f"inactive_file {GIB}\n")
    assert tree.memory().available() == GIB
    tree.level("box", memory_stat="inactive_file 0\n")
    assert tree.memory().available() == 0


def test_v2_max_means_no_limit(tree: Tree) -> None:
    tree.own_cgroup("0::/box\n")
    tree.level("box", memory_max="max", memory_current=20 * GIB, memory_stat="inactive_file 0\n")
    assert tree.figures() == MEMINFO_ONLY


def test_the_v1_unlimited_sentinel_means_no_limit(tree: Tree) -> None:
    tree.own_cgroup("4:memory:/box\n0::/\n")
    tree.level("memory/box", memory_limit_in_bytes=V1_UNLIMITED_READING, memory_usage_in_bytes=GIB)
    tree.level("memory", memory_limit_in_bytes=V1_UNLIMITED_READING, memory_usage_in_bytes=GIB)
    assert tree.figures() == MEMINFO_ONLY


def test_a_v1_limit_counts_total_inactive_file(tree: Tree) -> None:
    tree.own_cgroup("9:name=systemd:/\n4:memory:/box\n3:cpu,cpuacct:/\n0::/\n")
    tree.level(
        "memory/box",
        memory_limit_in_bytes=2 * GIB,
        memory_usage_in_bytes=GIB + 256 * MIB,
        memory_stat=f"inactive_file 1\ntotal_inactive_file {256 * MIB}\n",
    )
    assert tree.figures() == (2 * GIB, GIB)


def test_an_ancestor_tighter_than_the_own_cgroup_wins(tree: Tree) -> None:
    tree.own_cgroup("0::/parent/child\n")
    tree.level("parent", memory_max=2 * GIB, memory_current=GIB + 512 * MIB, memory_stat="inactive_file 0\n")
    tree.level("parent/child", memory_max=8 * GIB, memory_current=GIB, memory_stat="inactive_file 0\n")
    assert tree.figures() == (2 * GIB, 512 * MIB)


def test_inside_a_container_the_mount_root_holds_its_limit(tree: Tree) -> None:
    """Without a cgroup namespace /proc/self/cgroup names a host path the container cannot see;
    the cgroup fs mounted in the container is rooted at its own group."""
    tree.own_cgroup("0::/docker/0123abcd\n")
    tree.level(".", memory_max=3 * GIB, memory_current=GIB, memory_stat="inactive_file 0\n")
    assert tree.figures() == (3 * GIB, 2 * GIB)


def test_a_group_outside_the_cgroup_namespace_reads_only_the_mount_root(tree: Tree) -> None:
    tree.own_cgroup("0::/../../elsewhere\n")
    tree.level(".", memory_max=3 * GIB, memory_current=GIB)
    (tree.cgroup_fs.parent / "memory.max").write_text(f"{GIB}\n")  # outside the mount: not read
    assert tree.figures() == (3 * GIB, 2 * GIB)


def test_a_hybrid_host_reads_v2_under_unified(tree: Tree) -> None:
    tree.own_cgroup("4:memory:/\n0::/box\n")
    tree.level("unified/box", memory_max=GIB, memory_current=0)
    assert tree.memory().total() == GIB


@pytest.mark.parametrize(
    "files",
    [
        {},  # no memory files at all (the v2 root)
        {"memory_max": "garbage"},
        {"memory_max": ""},
    ],
)
def test_an_unreadable_limit_skips_the_level(tree: Tree, files: dict[str, str]) -> None:
    tree.own_cgroup("0::/box\n")
    tree.level("box", **files)
    assert tree.figures() == MEMINFO_ONLY


def test_missing_usage_or_stat_leaves_the_limit_as_the_cap(tree: Tree) -> None:
    tree.own_cgroup("0::/a/b\n")
    tree.level("a", memory_max=3 * GIB)  # no memory.current: at most the limit is available
    tree.level("a/b", memory_max=4 * GIB, memory_current=2 * GIB)  # no memory.stat: no cache counted
    assert tree.figures() == (3 * GIB, 2 * GIB)


def test_usage_over_the_limit_leaves_nothing(tree: Tree) -> None:
    tree.own_cgroup("0::/box\n")
    tree.level("box", memory_max=GIB, memory_current=2 * GIB)
    assert tree.memory().available() == 0


def test_nothing_readable_is_unknown_not_a_crash(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "no-proc", tmp_path / "no-cgroup")
    assert (memory.total(), memory.available()) == (None, None)


def test_garbled_proc_files_are_unknown(tree: Tree) -> None:
    (tree.proc / "meminfo").write_bytes(b"MemTotal: lots\n\xff\xfe")
    (tree.proc / "self" / "cgroup").write_bytes(b"\xff\xfe:nonsense")
    assert tree.memory().total() is None
    assert tree.memory().available() is None


def test_a_cgroup_limit_counts_even_where_meminfo_is_unreadable(tree: Tree) -> None:
    (tree.proc / "meminfo").unlink()
    tree.own_cgroup("0::/box\n")
    tree.level("box", memory_max=GIB, memory_current=0)
    assert tree.figures() == (GIB, GIB)


def test_the_live_worker_default_follows_the_cgroup_limit(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    tree.own_cgroup("0::/system.slice/mcp-router.service\n")
    tree.level("system.slice/mcp-router.service", memory_max=3 * WORKER_MEMORY_BYTES, memory_current=0)
    assert default_max_live_workers(tree.memory()) == 3
    monkeypatch.delenv("MCP_ROUTER_MAX_LIVE_WORKERS", raising=False)
    monkeypatch.setattr("router.settings.host_memory", tree.memory)
    assert Settings().max_live_workers == 3


def test_the_resume_reserve_stops_at_the_cgroup_limit(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """meminfo alone would leave room; the unit's limit does not."""
    monkeypatch.setattr("router.sessions.bringup.host_memory", tree.memory)
    tree.own_cgroup("0::/box\n")
    tree.level("box", memory_max=RESERVE_FREE_FLOOR + WARM_WORKER_BYTES, memory_current=MIB)
    assert room_for_another_warm_worker() is False
    tree.level("box", memory_current=0)
    assert room_for_another_warm_worker() is True
