"""py-spy on the router during a routed tool-call loop: where the router's CPU time goes."""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")
GROUPS = (  # first match wins, on the file of the frame that was running (py-spy prints relative paths)
    ("router (this project)", ("router/", "workers/")),
    ("httpx / httpcore / h11 (client to worker)", ("httpx/", "httpcore/", "h11/", "h2/")),
    ("uvicorn / httptools (server side)", ("uvicorn/", "httptools/")),
    ("starlette", ("starlette/",)),
    ("anyio / sniffio", ("anyio/", "sniffio/")),
    ("event loop: waiting in select", ("selectors.py",)),
    ("event loop (asyncio / uvloop)", ("asyncio/", "uvloop/", "socket.py")),
    ("json", ("json/",)),
    ("sqlite / aiosqlite (recorder)", ("aiosqlite/", "sqlite3/")),
    ("logging", ("logging/",)),
    ("ssl (httpx builds an SSL context per client)", ("ssl.py",)),
)


def py_spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def ensure_py_spy() -> str | None:
    found = py_spy()
    if found is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], capture_output=True, timeout=300)
        found = py_spy()
    return found


def start(pid: int, out: Path, rate: int = 250) -> subprocess.Popen[bytes] | None:
    exe = ensure_py_spy()
    if exe is None:
        return None
    return subprocess.Popen(
        [exe, "record", "-p", str(pid), "-r", str(rate), "-f", "raw", "-F", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _parse(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def _short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    file = m.group("file")
    for marker in ("site-packages/", "/lib/python3", "/work/main/", "/"):
        if marker in file:
            file = file.split(marker, 1)[1] if marker != "/" else file.rsplit("/", 1)[1]
            break
    return f"{m.group('func')} ({file})"


def _group(frame: str) -> str:
    m = _FRAME.match(frame)
    file = m.group("file") if m else frame
    for name, needles in GROUPS:
        if any(file.startswith(n) or f"/{n}" in file for n in needles):
            return name
    return "other"


def summary(
    path: Path, calls: int, top: int = 12, what: str = "routed `browser_snapshot`/`browser_tabs` calls"
) -> list[str]:
    every = _parse(path)
    # The main thread only: the others (aiosqlite's, asyncio's child watcher, to_thread) block in C
    # waits that py-spy cannot always tell from work.
    stacks = [(f, c) for f, c in every if f and "threading.py" not in f[0]]
    total = sum(c for _, c in stacks)
    if total == 0:
        return ["(py-spy collected no samples)"]
    by_group: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        leaf = frames[-1]
        by_group[_group(leaf)] += count
        self_time[_short(leaf)] += count
        for f in {_short(f) for f in frames if _group(f) == GROUPS[0][0]}:
            inclusive[f] += count
    other = sum(c for _, c in every) - total
    lines = [
        f"{total} main-thread samples ({other} in other threads left out) while the router served {calls} "
        f"{what}.",
        "",
        "| where (self time of the running frame) | share |",
        "|---|---:|",
    ]
    lines += [f"| {g} | {c / total * 100:.1f}% |" for g, c in by_group.most_common()]
    lines += ["", "| hottest frames (self) | share |", "|---|---:|"]
    lines += [f"| `{f}` | {c / total * 100:.1f}% |" for f, c in self_time.most_common(top)]
    lines += ["", "| router functions (inclusive) | share |", "|---|---:|"]
    lines += [f"| `{f}` | {c / total * 100:.1f}% |" for f, c in inclusive.most_common(top)]
    return lines
