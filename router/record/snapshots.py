"""Read @playwright/mcp answers: page snapshot, console entries, page facts, tabs; and the
compact summary sent instead of a whole answer (the text tools over the record are in
``text_views``).

Pure functions. The only I/O is reading the files the worker links to (``page-*.yml``,
``console-*.log``), and only files that resolve inside the session's output directory: the link
text comes from a browser-driven process and must not make the router read arbitrary files.

Answer format (0.0.83): one text part made of ``### `` sections — Error, Result, Ran Playwright
code, Open tabs, Page (``- Page URL:``, ``- Page Title:``, ``- Console: N errors, M warnings``),
Modal state, Snapshot (inline ```yaml block, or ``- [Snapshot](PATH)``), Events
(``- New console entries: PATH#Lx-Ly``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypedDict

MAX_FILE_BYTES: Final = 16 * 1024 * 1024  # a runaway snapshot must not exhaust the router's memory
# Linked files the record reads into the row (or ignores) and does not keep; files.py keeps the rest.
UNKEPT_LINK_TITLES: Final = frozenset({"Snapshot", "Storage state"})
# An answer whose only linked files are its snapshot and console entries has them read at once, into
# the row the answer waits for, when each is at most this big: a read from the page cache, where
# the writer thread would parse the answer again, read them and commit a second time (~1 ms of CPU).
READ_NOW_MAX: Final = 256 * 1024
LEVELS: Final = ("debug", "info", "warn", "error")

SNAPSHOT_LINK = re.compile(r"^- \[Snapshot\]\((?P<path>.+)\)\s*$", re.M)
# Every file the worker writes is linked as "- [Title](path)" (screenshots, pdfs, snapshots...).
_FILE_LINK = re.compile(r"^- \[(?P<title>[^\]\n]*)\]\((?P<path>[^)\n]+)\)\s*$", re.M)
_CONSOLE_LINK = re.compile(r"^- New console entries: (?P<path>.+?)#L(?P<a>\d+)(?:-L(?P<b>\d+))?\s*$", re.M)
_COUNTS = re.compile(r"^- Console: (?P<e>\d+) errors?, (?P<w>\d+) warnings?", re.M)
_URL = re.compile(r"^- Page URL: (?P<v>\S+)", re.M)
_TITLE = re.compile(r"^- Page Title: (?P<v>.*)$", re.M)
_YAML_OPEN: Final = "```yaml\n"
_FENCE_CLOSE: Final = "\n```"
# What an answer holds when it points at a file in the worker's output dir: a linked snapshot
# ("- [Snapshot](path)"), new console entries, or any other "- [Title](path)" link. A superset
# is fine: it only sends the answer to the writer thread to look.
_LINK_MARKERS: Final = ("- [", "- New console entries:")
# "[ERROR] text @ url:line" as printed by Playwright's ConsoleMessage.toString().
_LEVEL_PREFIX = re.compile(r"^\[(?P<t>[A-Za-z]+)\] ?")
# Lines of console-*.log start with the time since the log began: "[      34ms] ".
_LOG_TIME_PREFIX = re.compile(r"^\[\s*\d+ms\] ")
_LOCATION = re.compile(r" @ (?P<url>\S*):(?P<line>\d+)$")

# Playwright console types (upper-cased in the text) -> our four levels, mirroring the worker's own
# consoleLevelForMessageType so that counts agree with its "- Console:" line.
_TYPE_LEVEL: Final[Mapping[str, str]] = {
    "ERROR": "error", "ASSERT": "error",
    "WARNING": "warn", "WARN": "warn",
    "DEBUG": "debug", "TRACE": "debug", "CLEAR": "debug", "ENDGROUP": "debug", "PROFILE": "debug",
    "PROFILEEND": "debug", "STARTGROUP": "debug", "STARTGROUPCOLLAPSED": "debug",
}  # everything else (LOG, INFO, DIR, TABLE, COUNT, TIME...) is info
_KNOWN_TYPES: Final = frozenset(
    [*_TYPE_LEVEL, "LOG", "INFO", "DIR", "DIRXML", "TABLE", "COUNT", "TIME", "TIMEEND"]
)


class ConsoleEntry(TypedDict):
    level: str
    message: str
    location: dict[str, Any] | None


@dataclass(frozen=True)
class Extracted:
    page_snapshot: str | None = None
    console_lines: list[str] = field(default_factory=list)
    page_url: str | None = None
    page_title: str | None = None
    console_errors: int | None = None
    console_warnings: int | None = None
    has_image: bool = False
    is_error: bool = False
    snapshot_link: str | None = None  # the raw link text, when the snapshot lives in a file
    sections: dict[str, str] = field(default_factory=dict)
    links_files: bool = False  # it may point at files in the worker's output dir (see extract)
    link_titles: tuple[str, ...] = ()  # of its "- [Title](path)" links, when links_files
    linked_snapshot: str | None = None  # the snapshot file's text, once read for the record

    @property
    def needs_files(self) -> bool:
        """Whether recording it means reading or keeping files (linked ones, inline images)."""
        return self.links_files or self.has_image

    def for_record(self, output_dir: Path | None) -> tuple[str | None, list[str]] | None:
        """(snapshot, console lines) to write with the answer's row now: what the text holds, or
        with its linked snapshot and console entries read from ``output_dir`` (each at most
        READ_NOW_MAX). None when files must be read or kept later, on the writer thread: an image,
        a file the record keeps, a bigger file, or no ``output_dir`` to read from."""
        if not self.needs_files:
            return self.page_snapshot, self.console_lines
        if self.has_image or output_dir is None or not UNKEPT_LINK_TITLES.issuperset(self.link_titles):
            return None
        read = with_linked(self, output_dir, limit=READ_NOW_MAX)
        return None if read is None else (read.page_snapshot, read.console_lines)

    def snapshot_text(self, output_dir: Path | None) -> str | None:
        """The page snapshot, inline or from its linked file (already read, else read now, at most
        READ_NOW_MAX): a navigation's refs are only in the file."""
        if self.page_snapshot is not None or self.linked_snapshot is not None:
            return self.page_snapshot or self.linked_snapshot
        if not self.snapshot_link or output_dir is None:
            return None
        with contextlib.suppress(_TooBig):
            return _read_inside(self.snapshot_link, output_dir, None, READ_NOW_MAX)
        return None


def tool_result(raw: Any) -> Mapping[str, Any] | None:
    """The tools/call result object, whether given parsed or as JSON text/bytes, bare or inside
    the whole JSON-RPC message; None when it is not one."""
    parsed = raw
    if isinstance(raw, str | bytes):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return None
    if isinstance(parsed, Mapping) and "content" not in parsed and isinstance(parsed.get("result"), Mapping):
        parsed = parsed["result"]
    return parsed if isinstance(parsed, Mapping) else None


def page_url(text: str) -> str | None:
    """The last page URL a worker's answer text names (``- Page URL: ...``), if any."""
    found = _URL.findall(text)
    return found[-1] if found else None


def answer_text(result: Mapping[str, Any]) -> str:
    """All text parts of a tools/call result, joined."""
    content = result.get("content")
    if not isinstance(content, list):
        return ""
    return "\n".join(
        str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
    )


def file_links(result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(title, raw path)`` of every file link in the answer, in order (unresolved: callers pass
    the path to ``resolve_inside``)."""
    return [(m.group("title"), m.group("path").strip()) for m in _FILE_LINK.finditer(answer_text(result))]


def split_sections(text: str) -> dict[str, str]:
    """``### Name`` -> body. Headings inside ``` fences (e.g. evaluated text) are not sections.

    Runs on every tool answer: it visits only the lines that start with a backtick or a hash
    (``str.find`` between them), not every line of a long snapshot."""
    heads: list[tuple[int, int]] = []  # (start of the heading line, its end)
    in_fence = False
    pos = 0
    size = len(text)
    while pos < size:
        if text.startswith("```", pos):
            in_fence = not in_fence
        elif not in_fence and text.startswith("### ", pos):
            end = text.find("\n", pos)
            heads.append((pos, size if end < 0 else end))
        pos = _next_marked_line(text, pos)
    sections: dict[str, str] = {}
    for k, (start, end) in enumerate(heads):
        stop = heads[k + 1][0] - 1 if k + 1 < len(heads) else size
        sections[text[start + 4 : end].strip()] = text[end + 1 : stop] if end < stop else ""
    return sections


def _next_marked_line(text: str, pos: int) -> int:
    """The start of the next line after ``pos`` that begins with a backtick or a hash."""
    found = [i for i in (text.find("\n`", pos), text.find("\n#", pos)) if i >= 0]
    return min(found) + 1 if found else len(text)


def summarize(result: Mapping[str, Any]) -> Extracted:
    """Everything that can be known without touching the disk (the proxy's compact mode uses it).
    ``page_snapshot`` is set only when the YAML is inline."""
    text = answer_text(result)
    sections = split_sections(text)
    page = sections.get("Page", "")
    snap = sections.get("Snapshot", "")
    # str.find, not a lazy DOTALL regex: this runs on every tool answer, snapshots are long.
    inline = _inline_yaml(snap)
    link = SNAPSHOT_LINK.search(snap) if inline is None and "[Snapshot](" in snap else None
    counts = _COUNTS.search(page)
    title = _TITLE.search(page)
    content = result.get("content")
    has_image = isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "image" for p in content
    )
    links = any(marker in text for marker in _LINK_MARKERS)
    return Extracted(
        page_snapshot=inline,
        console_lines=_inline_console_lines(sections.get("Result", "")),
        page_url=page_url(page),
        page_title=title.group("v").strip() if title else None,
        console_errors=int(counts.group("e")) if counts else None,
        console_warnings=int(counts.group("w")) if counts else None,
        has_image=has_image,
        is_error=bool(result.get("isError")) or "Error" in sections,
        snapshot_link=link.group("path").strip() if link else None,
        sections=sections,
        links_files=links,
        link_titles=tuple(m.group("title") for m in _FILE_LINK.finditer(text)) if links else (),
    )


def _inline_yaml(section: str) -> str | None:
    start = section.find(_YAML_OPEN)
    if start < 0:
        return None
    start += len(_YAML_OPEN)
    end = section.find(_FENCE_CLOSE, start)
    return section[start:end] if end >= 0 else None


def extract(result: Mapping[str, Any], output_dir: Path, *, cwd: Path | None = None) -> Extracted:
    """``summarize`` plus the linked snapshot file and console lines read from the output dir.

    Relative links are resolved against ``cwd`` (the worker's working directory) when given, then
    against the output dir's parent and the output dir itself; whatever the candidate, it is read
    only if its real path lies inside ``output_dir``.
    """
    read = with_linked(summarize(result), output_dir, cwd=cwd)
    assert read is not None  # no limit, no refusal
    return read


def with_linked(
    base: Extracted, output_dir: Path, *, cwd: Path | None = None, limit: int | None = None
) -> Extracted | None:
    """``base`` (a ``summarize``) with its linked snapshot file and console lines read (see
    ``extract``). None when ``limit`` is given and a linked file is bigger than that."""
    try:
        snapshot = base.page_snapshot
        if snapshot is None and base.snapshot_link:
            snapshot = _read_inside(base.snapshot_link, output_dir, cwd, limit)
        console = list(base.console_lines)
        for m in _CONSOLE_LINK.finditer(base.sections.get("Events", "")):
            data = _read_inside(m.group("path"), output_dir, cwd, limit)
            if data is None:
                continue
            first = int(m.group("a"))
            last = int(m.group("b") or first)
            console.extend(data.split("\n")[first - 1 : last])
    except _TooBig:
        return None
    return dataclasses.replace(base, page_snapshot=snapshot, console_lines=console)


class _TooBig(Exception):
    """A linked file is past the reader's limit."""


def resolve_inside(raw: str, output_dir: Path, cwd: Path | None = None) -> Path | None:
    """The file a worker link points to, or None if it does not exist inside ``output_dir``.
    ``resolve()`` follows symlinks and ``..``, so neither can lead outside."""
    try:
        if os.path.dirname(raw) == str(output_dir) and os.path.isabs(raw):
            # The usual link (--output-dir given absolute): a regular file, not a symlink, right
            # in the dir is inside it, whatever the dir's own path resolves to; spares two
            # realpath walks (an lstat per path component) on every navigate's answer. Compared
            # as strings (pathlib's parsing was most of this on the writer thread): a link that
            # is not exactly "<dir>/<name>" takes the walks below.
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(raw).st_mode):
                    return Path(raw)
        link = Path(raw)
        root = output_dir.resolve()
        if link.is_absolute():
            candidates = [link]
        else:
            bases = [cwd] if cwd is not None else []
            candidates = [b / link for b in [*bases, output_dir.parent, output_dir]]
        for candidate in candidates:
            real = candidate.resolve()
            if real.is_relative_to(root) and real.is_file():
                return real
    except (OSError, ValueError, RuntimeError):
        return None
    return None


def _read_inside(raw: str, output_dir: Path, cwd: Path | None, limit: int | None = None) -> str | None:
    """The linked file's text (None: not inside ``output_dir`` or unreadable); raises _TooBig
    past ``limit`` (without one: the first MAX_FILE_BYTES)."""
    path = resolve_inside(raw, output_dir, cwd)
    if path is None:
        return None
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES if limit is None else limit + 1)
    except OSError:
        return None
    if limit is not None and len(data) > limit:
        raise _TooBig
    return data.decode("utf-8", errors="replace")


def _inline_console_lines(result_section: str) -> list[str]:
    """browser_console_messages: a "Total messages" header, maybe a "Returning N" line, a blank
    line, then one entry per line (multi-line texts continue on following lines)."""
    lines = result_section.split("\n")
    if not lines or not lines[0].startswith("Total messages:"):
        return []
    body = lines[1:]
    if body and body[0].startswith("Returning "):
        body = body[1:]
    while body and not body[0].strip():
        body = body[1:]
    while body and not body[-1].strip():
        body = body[:-1]
    return body


def normalize_console(lines: Iterable[str]) -> list[ConsoleEntry]:
    """Raw console lines (inline or from console-*.log) -> entries with level, message, location.

    A new entry starts at a ``[TYPE]`` prefix or at a log-file time prefix; other lines continue
    the previous entry (multi-line messages, stack traces). An uncaught page error is printed as
    its stack with no ``[TYPE]``: it counts as ``error``.
    """
    entries: list[tuple[str, list[str]]] = []
    for raw in lines:
        line = raw.rstrip("\r")
        timed = _LOG_TIME_PREFIX.match(line)
        if timed:
            line = line[timed.end():]
        typed = _LEVEL_PREFIX.match(line)
        if typed and typed.group("t").upper() in _KNOWN_TYPES:
            level = _TYPE_LEVEL.get(typed.group("t").upper(), "info")
            entries.append((level, [line[typed.end():]]))
        elif timed or not entries:
            if not line.strip():
                continue
            entries.append(("error" if timed else "info", [line]))
        else:
            entries[-1][1].append(line)
    out: list[ConsoleEntry] = []
    for level, parts in entries:
        message = "\n".join(parts)
        location: dict[str, Any] | None = None
        loc = _LOCATION.search(message)
        if loc:
            location = {"url": loc.group("url"), "line": int(loc.group("line"))}
            message = message[: loc.start()]
        out.append({"level": level, "message": message, "location": location})
    return out



def compact_summary(ref_id: str, tool: str, extracted: Extracted) -> str:
    """The short block compact mode sends instead of the worker's full answer."""
    has_snapshot = extracted.page_snapshot is not None or extracted.snapshot_link is not None
    lines = [f"ref_id: {ref_id}", f"tool: {tool}"]
    if extracted.page_url is not None:
        lines.append(f"page: {extracted.page_url}")
    if extracted.page_title is not None:
        lines.append(f"title: {extracted.page_title}")
    lines.append(f"snapshot available: {'yes' if has_snapshot else 'no'}")
    if extracted.console_errors is not None:
        lines.append(
            f"console: {extracted.console_errors} errors, {extracted.console_warnings or 0} warnings"
            f" (get_console_content(ref_id=\"{ref_id}\") lists them)"
        )
    if has_snapshot:
        lines.append(f'Call get_content(ref_id="{ref_id}") to read the page snapshot.')
    return "\n".join(lines)
