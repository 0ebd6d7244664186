"""Log set-up: readable text by default, one JSON object per line for journald pipelines."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any, Final

# The router's own requests to its workers: httpx logs each one at INFO ("HTTP Request: POST ...").
# One line per client call and per session event is the readable story; these show at debug only.
QUIET_LOGGERS: Final = ("httpx", "httpcore")

_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None)))
# Lifecycle lines say "session=ID" (and call lines "ref=ID") in their text; the JSON form lifts
# them into keys even when the call site passed no `extra`, so `jq 'select(.session == "…")'`
# finds every line of a session's story, whoever wrote the log call.
# Minted ids are URL-safe base64 (after "<node>." with --node-id), ref_ids UUIDs: neither takes
# in a trailing ':' or ','.
_KEYS_IN_TEXT = (
    ("session", re.compile(r"\bsession=((?:[A-Za-z0-9_-]+\.)?[A-Za-z0-9_-]+)")),
    ("ref_id", re.compile(r"\bref=([A-Za-z0-9-]+)")),
)

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Log arguments carry client-chosen text (tool names, methods, ids): a newline in one must not
# start a forged line, nor an escape sequence drive the operator's terminal. C0, DEL, C1 and the
# Unicode line/paragraph separators are written as escapes.
_CONTROLS: Final = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
} | {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


_ANY_CONTROL: Final = re.compile("[" + re.escape("".join(map(chr, _CONTROLS))) + "]")


def escape_controls(text: str) -> str:
    # Nearly every line has nothing to escape: one search in C, not a lookup per character.
    return text.translate(_CONTROLS) if _ANY_CONTROL.search(text) else text


class PerSecond:
    """A time formatted to the second, once a second: every call writes a log line, and
    localtime + strftime were ~15 % of it."""

    def __init__(self, fmt: str, convert: Callable[[float], time.struct_time]) -> None:
        self._fmt = fmt
        self._convert = convert
        self._second = -1
        self._text = ""

    def __call__(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._text = time.strftime(self._fmt, self._convert(second))
            self._second = second
        return self._text


class TextFormatter(logging.Formatter):
    """One line per record: the message (with its arguments) has its control characters escaped;
    only a traceback, appended after it, spans lines."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._stamp = PerSecond(self.default_time_format, time.localtime)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        return f"{self._stamp(record.created)},{int(record.msecs):03d}"  # logging's own default form

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))


def _escaped(value: Any) -> Any:
    return escape_controls(value) if isinstance(value, str) else value


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._stamp = PerSecond("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        # json.dumps already escapes control characters; escaping the text as well keeps a value
        # on one line once a reader decodes it (`jq -r .msg`).
        entry = {
            "ts": f"{self._stamp(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": escape_controls(record.getMessage()),
        }
        entry.update(
            {k: _escaped(v) for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")}
        )
        for key, pattern in _KEYS_IN_TEXT:
            if key not in entry:
                found = pattern.search(entry["msg"])
                if found:
                    entry[key] = found.group(1)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    quiet = logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
