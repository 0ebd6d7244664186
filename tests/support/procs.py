"""Whether a process is still there, as tests that kill or stop workers need to know."""

from __future__ import annotations

from pathlib import Path


def dead(pid: int) -> bool:
    """Exited: gone, or a zombie its parent has not reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def renderers_of(browser: int) -> list[int]:
    """The renderer processes of a Chromium (its pages' processes, under its zygote)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # A zygote's child rewrites its argv as one string: a substring, not an element.
            if b"--type=renderer" not in (entry / "cmdline").read_bytes():
                continue
        except OSError:
            continue
        pid, ancestor = int(entry.name), _parent(int(entry.name))
        for _ in range(4):  # renderer -> zygote -> (zygote) -> browser
            if ancestor in (None, 0, 1) or ancestor == browser:
                break
            ancestor = _parent(ancestor)
        if ancestor == browser:
            found.append(pid)
    return found
