"""What the dashboard shows of one recorded call beyond its row: the images and other files the
worker produced, and the snapshot and console read back from the worker's answer when the row
holds none.

Images come from three places: ``image`` parts of the result (base64, in the record for good),
files the recorder kept for the call (``StateLayout.files_dir(ref_id)``, same retention as the
row), and, for calls recorded before files were kept, image files the answer links inside the
session's output directory (there only while the session is live). A link is followed only when
it resolves inside that directory: the text comes from a browser-driven process and must not
make the router serve arbitrary files.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from router.record.files import IMAGE_MIMES, MAX_FILE_BYTES, KeptFile, read_kept
from router.record.snapshots import extract, file_links, normalize_console, resolve_inside, summarize

# Raster types only: an SVG is a document that can carry script.
IMAGE_TYPES: Final = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "image/gif": ".gif"}
MAX_IMAGE_BYTES: Final = MAX_FILE_BYTES


@dataclass(frozen=True)
class CallImage:
    mime: str
    source: str  # "result" (inline base64), "kept" (the record's copy) or "file" (the output dir)
    name: str
    data: bytes | None = None  # inline images
    path: Path | None = None  # linked files, already checked to lie inside their directory

    def read(self) -> bytes | None:
        if self.data is not None:
            return self.data
        assert self.path is not None
        if self.source == "kept":
            return read_kept(self.path.parent, self.path.name)
        try:
            with self.path.open("rb") as f:
                return f.read(MAX_IMAGE_BYTES)
        except OSError:
            return None


def inline_images(result: Mapping[str, Any] | None) -> list[CallImage]:
    """The ``image`` parts of a result that decode and are of a raster type."""
    images: list[CallImage] = []
    content = result.get("content") if result is not None else None
    for i, part in enumerate(content if isinstance(content, list) else []):
        if not isinstance(part, dict) or part.get("type") != "image":
            continue
        mime = str(part.get("mimeType", "")).lower()
        if mime not in IMAGE_TYPES:
            continue
        try:
            data = base64.b64decode(str(part.get("data", "")), validate=True)
        except (binascii.Error, ValueError):
            continue
        images.append(CallImage(mime, "result", f"image-{i}{IMAGE_TYPES[mime]}", data=data))
    return images


def call_images(
    result: Mapping[str, Any] | None, output_dir: Path | None, *,
    kept: Sequence[KeptFile] = (), files_dir: Path | None = None,
) -> list[CallImage]:
    """Inline images first, then the kept image files, then linked files in the output dir that
    were not kept and are not identical to an inline image (the worker returns a screenshot both
    ways). The list order is the ``n`` of /api/calls/{ref}/images/{n}."""
    if result is None:
        return []
    images = inline_images(result)
    if files_dir is not None:
        images += [CallImage(f.mime, "kept", f.name, path=files_dir / f.name) for f in kept if f.is_image]
    if output_dir is None or not output_dir.is_dir():
        return images
    inline = {img.data for img in images if img.data is not None}
    kept_names = {f.name for f in kept}
    seen: set[Path] = set()
    for _, raw in file_links(result):
        path = resolve_inside(raw, output_dir, output_dir)
        mime = IMAGE_MIMES.get(path.suffix.lower()) if path is not None else None
        if path is None or mime is None or path in seen or path.name in kept_names:
            continue
        seen.add(path)
        image = CallImage(mime, "file", path.name, path=path)
        if image.read() not in inline:
            images.append(image)
    return images


def fill_from_answer(call: dict[str, Any], result: Mapping[str, Any] | None, output_dir: Path | None) -> None:
    """When the row holds no snapshot or console (older rows, a recorder that was not given the
    output dir), read them from the answer itself: the inline YAML always, linked files while the
    session's directory exists."""
    if result is None or (call.get("page_snapshot") and call.get("console")):
        return
    if output_dir is not None and output_dir.is_dir():
        extracted = extract(result, output_dir, cwd=output_dir)
    else:
        extracted = summarize(result)
    if not call.get("page_snapshot") and extracted.page_snapshot:
        call["page_snapshot"] = extracted.page_snapshot
        call["page_snapshot_source"] = "answer"
    if not call.get("console") and extracted.console_lines:
        call["console"] = [dict(e) for e in normalize_console(extracted.console_lines)]
