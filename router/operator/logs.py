"""Log set-up: readable text by default, one JSON object per line for journald pipelines."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Final

# The router's own requests to its workers: httpx logs each one at INFO ("HTTP Request: POST ...").
# One line per client call and per session event is the readable story; these show at debug only.
QUIET_LOGGERS: Final = ("httpx", "httpcore")

_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None)))
# Lifecycle lines say "session=ID" (and call lines "ref=ID") in their text; the JSON form lifts
# them into keys even when the call site passed no `extra`, so `jq 'select(.session == "…")'`
# finds every line of a session's story, whoever wrote the log call.
# Minted ids are URL-safe base64, ref_ids UUIDs: neither takes in a trailing ':' or ','.
_KEYS_IN_TEXT = (
    ("session", re.compile(r"\bsession=([A-Za-z0-9_-]+)")),
    ("ref_id", re.compile(r"\bref=([A-Za-z0-9-]+)")),
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")})
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
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    quiet = logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
