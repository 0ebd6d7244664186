"""What the dashboard shows of one recorded call beyond its row: the images the worker produced,
and the snapshot and console read back from the worker's answer when the row holds none.

Images come from two places: ``image`` parts of the result (base64, kept in the record for good)
and image files the answer links to inside the session's output directory (there only while the
session's files exist). A link is followed only when it resolves inside that directory: the text
comes from a browser-driven process and must not make the router serve arbitrary files.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from router.record.snapshots import answer_text, extract, normalize_console, resolve_inside, summarize

# Raster types only: an SVG is a document that can carry script.
IMAGE_TYPES: Final = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "image/gif": ".gif"}
_SUFFIX_TYPES: Final = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                        ".webp": "image/webp", ".gif": "image/gif"}
_IMAGE_LINK = re.compile(r"\]\((?P<path>[^)\n]+?\.(?:png|jpe?g|webp|gif))\)", re.I)
MAX_IMAGE_BYTES: Final = 32 * 1024 * 1024


@dataclass(frozen=True)
class CallImage:
    mime: str
    source: str  # "result" (inline base64) or "file" (linked in the output dir)
    name: str
    data: bytes | None = None  # inline images
    path: Path | None = None  # linked files, already checked to lie inside the output dir

    def read(self) -> bytes | None:
        if self.data is not None:
            return self.data
        assert self.path is not None
        try:
            with self.path.open("rb") as f:
                return f.read(MAX_IMAGE_BYTES)
        except OSError:
            return None


def call_images(result: Mapping[str, Any] | None, output_dir: Path | None) -> list[CallImage]:
    """Inline images first, then linked files not identical to one of them (the worker returns
    a screenshot both ways). The list order is the ``n`` of /api/calls/{ref}/images/{n}."""
    if result is None:
        return []
    images: list[CallImage] = []
    content = result.get("content")
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
    if output_dir is None or not output_dir.is_dir():
        return images
    inline = {img.data for img in images}
    seen: set[Path] = set()
    for match in _IMAGE_LINK.finditer(answer_text(result)):
        path = resolve_inside(match.group("path").strip(), output_dir, output_dir)
        if path is None or path in seen:
            continue
        seen.add(path)
        image = CallImage(_SUFFIX_TYPES[path.suffix.lower()], "file", path.name, path=path)
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
