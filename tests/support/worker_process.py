"""A worker process a test starts straight, with no router or supervisor, and reaps with all it
launched: node ends on SIGTERM (closing its browser), the marker finds what is left (Chromium runs
in a session of its own)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import httpx

from tests.support.wait import wait_for
from workers.orphans import end_processes, marker_env, processes_for

READY_TIMEOUT: Final = 20.0
EXIT_TIMEOUT: Final = 5.0


class WorkerProcess:
    """``url``: where it answers, with the host name it accepts (``localhost:<port>``)."""

    def __init__(
        self, argv: Sequence[str], *, url: str, state_dir: Path, marker_session: str, cwd: Path | None = None
    ) -> None:
        self.argv = list(argv)
        self.url = url
        self.state_dir = state_dir
        self.marker_session = marker_session
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    def __enter__(self) -> WorkerProcess:
        env = {**os.environ, **marker_env(self.state_dir, self.marker_session)}
        self._proc = subprocess.Popen(
            self.argv,
            env=env,
            cwd=self.cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_for(lambda: self._answers() or not self.running(), timeout=READY_TIMEOUT)
            assert self.running(), f"worker exited: {self.argv}"
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=EXIT_TIMEOUT)
        end_processes(self.tree())
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=EXIT_TIMEOUT)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def tree(self) -> list[int]:
        """Every process of the worker: node, its browser and the browser's helpers."""
        return processes_for(self.state_dir, self.marker_session)

    def _answers(self) -> bool:
        try:
            httpx.get(self.url, headers={"accept": "text/event-stream"}, timeout=1, trust_env=False)
        except httpx.HTTPError:
            return False
        return True


def without_pair(argv: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """``argv`` without each occurrence of ``pair`` as two adjacent items (a flag and its value)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if tuple(argv[i : i + 2]) == pair:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return tuple(out)
