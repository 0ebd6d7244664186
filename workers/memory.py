"""Memory the router may plan with: the machine's, or less where a cgroup caps it.

/proc/meminfo shows the host's RAM even inside a container or a systemd unit with MemoryMax, so
sizing from it alone over-admits workers there and the OOM killer settles the difference. Each
figure is the lowest of meminfo and every memory cgroup level from the process's own up to the
root: a parent's limit binds its children too, and in a container the mounted root *is* the
container's cgroup. A level whose files are missing or unreadable is skipped, never fatal.

Under a cgroup, what is available is the limit less the group's working set (usage less its
inactive page cache), the figure its OOM killer and Kubernetes go by. That counts active page cache
(Chromium's mapped binaries, its disk cache) as used, where the host's MemAvailable counts part of
it as free: a container reads shorter than the same load on the host, which errs towards fewer warm
workers, never towards the OOM killer. ``memory.high`` (throttling, not killing) is not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

__all__ = ["CGROUP_FS", "PROC", "V1_UNLIMITED", "Memory", "host_memory"]

PROC: Final = Path("/proc")
CGROUP_FS: Final = Path("/sys/fs/cgroup")
# cgroup v1 has no "max": an unlimited group reports LONG_MAX rounded down to a page (and older
# kernels other huge values); anything this large is no limit.
V1_UNLIMITED: Final = 2**62
KIB: Final = 1024


@dataclass(frozen=True)
class _Level:
    """One cgroup level's cap, and what is left under it."""

    limit: int
    available: int


@dataclass(frozen=True)
class _Files:
    """Where a cgroup version keeps the limit, the usage and the reclaimable page cache."""

    limit: str
    usage: str
    inactive_file: str
    unlimited: str | None  # the literal that means no limit (v2 "max"), besides huge values


V2: Final = _Files("memory.max", "memory.current", "inactive_file", "max")
V1: Final = _Files("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file", None)


class Memory:
    """``total()`` and ``available()`` in bytes, None only where neither meminfo nor any cgroup
    level can be read. ``proc`` and ``cgroup_fs`` are roots so tests hand in fake trees."""

    def __init__(self, proc: Path, cgroup_fs: Path) -> None:
        self.proc = proc
        self.cgroup_fs = cgroup_fs

    def total(self) -> int | None:
        return _lowest([self._meminfo("MemTotal"), *(level.limit for level in self._levels())])

    def available(self) -> int | None:
        """What could be handed out without swapping or hitting a cgroup limit. Inactive page
        cache counts as free, as in MemAvailable: the kernel reclaims it before it OOM-kills."""
        return _lowest([self._meminfo("MemAvailable"), *(level.available for level in self._levels())])

    def _meminfo(self, key: str) -> int | None:
        fields = _key_values(self.proc / "meminfo", separator=":")
        value = fields.get(key)
        return value * KIB if value is not None else None

    def _levels(self) -> Iterator[_Level]:
        for version, mount, group in self._own_groups():
            # The group itself, then each parent up to the hierarchy's root. Seen from inside a
            # container without its own cgroup namespace the host path is absent: those levels
            # are skipped, and the mount's root is the container's cgroup, with its limit.
            for relative in (group, *group.parents):
                level = _read_level(mount / relative, version)
                if level is not None:
                    yield level

    def _own_groups(self) -> Iterator[tuple[_Files, Path, PurePosixPath]]:
        """Each memory hierarchy this process is in, per /proc/self/cgroup, as (version, mount,
        group path under the mount): v2 from the line "0::<path>", v1 from "<n>:<controllers>:
        <path>" whose controllers include memory."""
        try:
            lines = (self.proc / "self" / "cgroup").read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            return
        for line in lines:
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            hierarchy, controllers, path = parts
            group = PurePosixPath(path.lstrip("/"))
            if ".." in group.parts:  # a group outside our cgroup namespace: only its root is ours
                group = PurePosixPath()
            if hierarchy == "0" and not controllers:
                # A pure v2 set-up mounts it at the root, a hybrid one under unified/.
                yield V2, self.cgroup_fs, group
                yield V2, self.cgroup_fs / "unified", group
            elif "memory" in controllers.split(","):
                # Mounted under the controller list's name; co-mounted ones also get a memory link.
                mount = self.cgroup_fs / controllers
                yield V1, mount, group
                if controllers != "memory":
                    yield V1, self.cgroup_fs / "memory", group


def host_memory() -> Memory:
    """This machine's memory, as the router and its workers see it."""
    return Memory(PROC, CGROUP_FS)


def _read_level(directory: Path, files: _Files) -> _Level | None:
    """The level's limit and what is left under it; None where it has no limit or its limit
    cannot be read. Without a usage figure the limit itself still caps what is available."""
    limit = _read_limit(directory / files.limit, files.unlimited)
    if limit is None:
        return None
    usage = _read_int(directory / files.usage)
    if usage is None:
        return _Level(limit, limit)
    # A missing memory.stat counts no cache as reclaimable: the cautious side.
    inactive = _key_values(directory / "memory.stat", separator=" ").get(files.inactive_file, 0)
    return _Level(limit, max(0, limit - max(0, usage - inactive)))


def _read_limit(path: Path, unlimited: str | None) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if text == unlimited:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 <= value < V1_UNLIMITED else None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _key_values(path: Path, *, separator: str) -> dict[str, int]:
    """Lines of a key, the separator and a number (meminfo's "MemTotal: 123 kB", memory.stat's
    "inactive_file 456") as a dict; other lines are skipped."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    values: dict[str, int] = {}
    for line in lines:
        key, _, rest = line.partition(separator)
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0])
    return values


def _lowest(values: list[int | None]) -> int | None:
    known = [value for value in values if value is not None]
    return min(known) if known else None
