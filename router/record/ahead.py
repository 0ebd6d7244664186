"""The record's write-ahead file: what a tool answer waits for, one ``write()`` instead of a commit.

A tool answer leaves only once its call is in the record: a SIGKILL of the router must not lose a
call the client saw. Committing the call to SQLite first costs ~20 system calls (WAL frames and
their headers, file locks), 0.15-0.2 ms after the pause between a call's request and its answer;
appending the queued rows to this file costs one. The rows are committed once the answer has
left (``Recorder.settle``, within 0.1 s: answers close together share a commit), and once SQLite
holds everything the file holds, the file is emptied. A batch the writer thread takes is appended
first too, so an answer during it still waits for the file only. A router that died in between
replays the file into SQLite when it next starts, skipping the rows SQLite already has
(``RowWriter.recorded``).

A frame is a header (the payload's length and CRC-32) and a payload: the marshalled rows of one
append. A torn last frame (the process died inside the ``write()``, so its answer never left)
fails its length or its CRC, and the replay ends there. Durability is the WAL's at
synchronous=NORMAL: the rows survive the process, not the machine losing power.
"""

from __future__ import annotations

import logging
import marshal
import os
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from router.record.queue import ItemQueue
from router.record.rows import RESPONSE_PATHS, Item

log = logging.getLogger("router.record.recorder")

HEADER: Final = struct.Struct("<II")  # payload length, CRC-32 of the payload
MARSHAL_VERSION: Final = 4
SUFFIX: Final = ".ahead"
# cover() appends at most this many items and bytes; past either, the queue is a backlog the writer
# thread batches (a screenshot answer of several MB would be written twice on the answer's path).
AHEAD_MAX: Final = 32
AHEAD_MAX_BYTES: Final = 8 * 1024 * 1024
# Once a commit lost rows the file holds, it is kept for the next start's replay, up to this size.
KEEP_MAX_BYTES: Final = 64 * 1024 * 1024
# Fields of an item's data that are paths: marshal takes no Path.
_PATH_FIELDS: Final = {"response": RESPONSE_PATHS}


def path_for(db_path: Path) -> Path:
    """The write-ahead file beside the database (``router.db.ahead``)."""
    return db_path.with_name(db_path.name + SUFFIX)


def holds_rows(db_path: Path) -> bool:
    """Whether the write-ahead file beside the database holds rows: answered calls a running
    router has not committed yet, or a stopped one writes when it next starts."""
    try:
        return path_for(db_path).stat().st_size > 0
    except FileNotFoundError:
        return False


def set_aside_files(db_path: Path) -> list[Path]:
    """The write-ahead files a replay could not write, kept for a person (``AheadLog.set_aside``)."""
    ahead = path_for(db_path)
    return sorted(ahead.parent.glob(f"{ahead.name}.*"))


class AheadLog:
    """Appends rows on the event loop (one ``write()`` per ``append``); loop-side only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.upto = 0  # the last item seq appended this run: everything up to it is durable
        self._fd: int | None = None
        self._size = 0
        self._keep = False  # a commit lost rows the file holds: the next start replays them

    @contextmanager
    def opened(self) -> Iterator[None]:
        """The file for a run, started empty (after ``read`` and the replay of what it held, or
        ``set_aside``); closed at its end. Without it, answers wait for their commits."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                os.ftruncate(fd, 0)
            except OSError:
                os.close(fd)
                raise
        except OSError as exc:
            log.error("recorder: no write-ahead file (%s): tool answers wait for their commits", exc)
        else:
            self._fd, self._size, self._keep = fd, 0, False
        try:
            yield
        finally:
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def set_aside(self) -> Path | None:
        """Renames what a replay could not write (or read) out of the way, for a person to look at;
        the new name, or None when there was nothing or it could not be moved."""
        # The pid too: a rename over an earlier file set aside in the same second would lose it.
        aside = self.path.with_name(f"{self.path.name}.{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        try:
            self.path.rename(aside)
        except OSError:
            return None
        log.error("recorder: rows of the write-ahead file not replayed; the file is kept as %s", aside)
        return aside

    def _disable(self, why: str) -> None:
        """Answers wait for their commits for the rest of this run, as they did before the file."""
        log.error("recorder: write-ahead file given up (%s): tool answers wait for their commits", why)
        self.close()

    def cover(self, queue: ItemQueue, done: int) -> bool:
        """Whether every item ``queue`` gave out and SQLite has not got (up to seq ``done``) is in
        the file, once what is queued past the file is appended."""
        if self.upto >= queue.enqueued:
            return True
        if queue.taken > max(done, self.upto):
            return False  # a batch on the writer thread holds items the file has not got
        items = queue.newer_than(self.upto)
        if len(items) > AHEAD_MAX or sum(i.size for i in items) > AHEAD_MAX_BYTES:
            return False
        return all(i.kind != "dropped" for i in items) and self.append(items)

    def append(self, items: Sequence[Item]) -> bool:
        """The items in one ``write()``; False when they are not in the file (not open, an item
        marshal cannot take, a full disk): the caller commits them instead."""
        if self._fd is None or not items:
            return False
        try:
            payload = marshal.dumps([_plain(item) for item in items], MARSHAL_VERSION)
        except ValueError:
            return False
        frame = HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        try:
            written = os.write(self._fd, frame)
        except OSError as exc:  # a full disk: one log line, not one per answer
            self._disable(repr(exc))
            return False
        if written != len(frame):
            # A short write: the torn frame would end a replay before anything appended after it.
            self._truncate(self._size)
            return False
        self._size += written
        self.upto = items[-1].seq
        return True

    def committed(self, done: int, lost: Sequence[int]) -> None:
        """A commit covered every item up to seq ``done`` but ``lost``: the file is emptied once
        that covers all it holds (one ``ftruncate`` per commit, after the answer). A lost item the
        file holds (a commit that failed: a lock held past the busy timeout, a full disk) keeps
        the file as it is for the next start, within KEEP_MAX_BYTES."""
        if not self._keep and any(seq <= self.upto for seq in lost) and self._size:
            self._keep = True
            log.error("recorder: a commit lost rows the write-ahead file holds: kept for the next start's replay")
        if self._keep:
            if self._size < KEEP_MAX_BYTES:
                return
            log.error("recorder: write-ahead file past %d bytes: the lost rows it kept are given up", KEEP_MAX_BYTES)
            self._keep = False
        if self._size and done >= self.upto:
            self._truncate(0)

    def _truncate(self, size: int) -> None:
        """Cuts the file back; failing, gives it up (what follows a torn frame would not be read)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:
            self._disable(f"not cut back: {exc!r}")
            return
        self._size = size


def read(path: Path) -> list[Item] | None:
    """The items a file holds, in order, up to a torn last frame if any (logged); None when it
    cannot be read (the caller sets it aside rather than start it over)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.error("recorder: write-ahead file %s not read: %s", path, exc)
        return None
    items: list[Item] = []
    at = 0
    while at < len(data):
        torn = at + HEADER.size > len(data)  # not even a whole header
        length, crc = (0, 0) if torn else HEADER.unpack_from(data, at)
        payload = data[at + HEADER.size : at + HEADER.size + length]
        if torn or len(payload) != length or zlib.crc32(payload) != crc:
            log.warning("recorder: write-ahead file ends in a torn write at byte %d: an answer that never left", at)
            break
        try:
            items += [_item(row) for row in marshal.loads(payload)]
        except (ValueError, TypeError, EOFError) as exc:  # a whole frame this Python cannot read
            log.error("recorder: write-ahead file %s: frame at byte %d not read: %r", path, at, exc)
            return None
        at += HEADER.size + length
    return items


def _plain(item: Item) -> tuple[Any, ...]:
    data = item.data
    if (paths := _PATH_FIELDS.get(item.kind)) is not None:
        data = tuple(str(v) if i in paths and v is not None else v for i, v in enumerate(data))
    return (item.kind, item.ts, item.key, data, item.seq)


def _item(row: tuple[Any, ...]) -> Item:
    kind, ts, key, data, seq = row
    if (paths := _PATH_FIELDS.get(kind)) is not None:
        data = tuple(Path(v) if i in paths and v is not None else v for i, v in enumerate(data))
    return Item(kind, ts, key, tuple(data), seq, 0)
