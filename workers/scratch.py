"""Where a worker's browser writes what nobody asked it to keep: nothing of it outlives the worker.

Each worker gets its own ``XDG_CACHE_HOME`` in its session directory (Playwright writes a browser
descriptor to ``$XDG_CACHE_HOME/ms-playwright/b/`` for every launch and never removes it for a
persistent profile) and its own ``TMPDIR``. The temp dir cannot live in the session directory:
Chromium (its SingletonSocket) and Playwright (its browser endpoint) put unix sockets there, and a
socket path may not exceed ~104 bytes. So temp dirs live under one short private root per
supervisor run (``mkdtemp``: 0700, unguessable), each removed with its worker, the root with the
run; a root left by a killed router is removed at the next start, which finds it recorded in the
state dir.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Final

__all__ = ["CACHE_DIR", "ROOT_PREFIX", "Scratch"]

log = logging.getLogger(__name__)

ROOT_PREFIX: Final = "mcp-router-"
ROOT_RECORD: Final = "worker-tmp"  # in the state dir: the path of the current run's root
CACHE_DIR: Final = "cache"  # in the session dir
KEY_CHARS: Final = 12  # of a hash of the session id: short, and no id characters in a path


class Scratch:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.root: Path | None = None

    def open(self) -> None:
        """Remove the root a previous run left behind, then make this run's."""
        self._remove_recorded_root()
        self.root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
        record = self.state_dir / ROOT_RECORD
        self.state_dir.mkdir(parents=True, exist_ok=True)
        record.write_text(str(self.root))

    def close(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        (self.state_dir / ROOT_RECORD).unlink(missing_ok=True)

    def temp_dir(self, session_id: str) -> Path:
        """A fresh, empty, private temp dir for the session's next worker."""
        if self.root is None:
            raise RuntimeError("Scratch.open() first")
        path = self.root / hashlib.sha256(session_id.encode()).hexdigest()[:KEY_CHARS]
        shutil.rmtree(path, ignore_errors=True)  # a previous worker's, if its clean-up was cut short
        path.mkdir(mode=0o700)
        return path

    def remove(self, session_id: str) -> None:
        if self.root is not None:
            shutil.rmtree(self.root / hashlib.sha256(session_id.encode()).hexdigest()[:KEY_CHARS], ignore_errors=True)

    @staticmethod
    def cache_dir(session_dir: Path) -> Path:
        path = session_dir / CACHE_DIR
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _remove_recorded_root(self) -> None:
        try:
            recorded = Path((self.state_dir / ROOT_RECORD).read_text().strip())
        except OSError:
            return
        # Only what we made: an absolute path named like ours, a real directory, our own.
        with contextlib.suppress(OSError):
            info = recorded.lstat()
            if (
                recorded.is_absolute()
                and recorded.name.startswith(ROOT_PREFIX)
                and not recorded.is_symlink()
                and recorded.is_dir()
                and info.st_uid == os.geteuid()
            ):
                shutil.rmtree(recorded, ignore_errors=True)
                log.info("removed worker temp dirs left by a previous run: %s", recorded)
