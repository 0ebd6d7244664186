"""Files a recorded call linked (screenshots, pdfs, downloads...), copied out of the worker's output
dir into the record's own directory (``StateLayout.files_dir(ref_id)``).

The output dir is cleared when a session goes dormant; the record keeps what it needs: snapshots
and console text as rows, every other linked file here, for as long as the call's row (same
retention). Runs on the recorder's writer thread.

A link is followed only when it resolves inside the output dir (the text comes from a
browser-driven process). Snapshots and console logs are already rows; storage-state files hold
credentials and the router's own save files are hidden names: neither is kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from router.record.snapshots import UNKEPT_LINK_TITLES, file_links, resolve_inside

MAX_FILE_BYTES: Final = 32 * 1024 * 1024  # larger files stay where the worker wrote them
MAX_FILES_PER_CALL: Final = 16
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

# Raster images only are shown inline: an SVG is a document that can carry script.
IMAGE_MIMES: Final = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                      ".webp": "image/webp", ".gif": "image/gif"}
OTHER_MIMES: Final = {".pdf": "application/pdf", ".webm": "video/webm", ".json": "application/json",
                      ".txt": "text/plain", ".har": "application/json"}


@dataclass(frozen=True)
class KeptFile:
    name: str  # file name inside files_dir(ref_id); safe characters only
    title: str  # the link's title in the answer, e.g. "Screenshot of viewport"
    mime: str
    size: int

    @property
    def is_image(self) -> bool:
        return self.mime in IMAGE_MIMES.values()


def mime_for(name: str) -> str:
    suffix = Path(name).suffix.lower()
    return IMAGE_MIMES.get(suffix) or OTHER_MIMES.get(suffix) or "application/octet-stream"


def safe_name(name: str) -> str:
    cleaned = _UNSAFE.sub("_", name).lstrip(".")[:120]
    return cleaned or "file"


def keep_linked(
    result: Mapping[str, Any], output_dir: Path, dest: Path, *, cwd: Path | None = None,
    inline: Collection[bytes] = (),
) -> list[KeptFile]:
    """Copy the files the answer links (inside ``output_dir``) to ``dest``; what was kept.
    A file identical to one of the answer's ``inline`` images is in the record already (the
    worker returns a screenshot both ways) and is not copied."""
    kept: list[KeptFile] = []
    seen: set[Path] = set()
    for title, raw in file_links(result):
        if len(kept) >= MAX_FILES_PER_CALL:
            break
        if title in UNKEPT_LINK_TITLES:
            continue
        source = resolve_inside(raw, output_dir, cwd)
        if source is None or source in seen or source.name.startswith("."):
            continue
        seen.add(source)
        data = _read_bounded(source)
        if data is None or data in inline:
            continue
        name = _unique(safe_name(source.name), {k.name for k in kept})
        if _write(dest, name, data):
            kept.append(KeptFile(name, title, mime_for(name), len(data)))
    return kept


def _unique(name: str, taken: set[str]) -> str:
    stem, suffix, n = Path(name).stem, Path(name).suffix, 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}{suffix}"
    return name


def _read_bounded(source: Path) -> bytes | None:
    """The file's bytes, or None when it cannot be read or is larger than MAX_FILE_BYTES."""
    try:
        with open(source, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= MAX_FILE_BYTES else None


def _write(dest: Path, name: str, data: bytes) -> bool:
    target = dest / name
    try:
        dest.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            target.unlink()
        return False


def read_kept(dest: Path, name: str) -> bytes | None:
    """A kept file's bytes; ``name`` must be one the record lists for the call (never a path
    taken from a URL as such)."""
    if safe_name(name) != name:
        return None
    try:
        with open(dest / name, "rb") as f:
            return f.read(MAX_FILE_BYTES)
    except OSError:
        return None


def remove(dirs: Iterable[Path]) -> None:
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)
