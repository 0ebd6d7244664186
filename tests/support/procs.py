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
