"""A worker's JSON-RPC answer to one request, parsed once into one summary (``WorkerAnswer``):
the exchange, the record, the catalog and the session's continuity all read that summary, never
the worker's bytes again. What the client gets is the message serialised again
(``reframed``), with the router's changes (the call's refId, a notice, a compacted result) made
on the parsed values, so they do not depend on how the worker spelled its JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from router.record.snapshots import Extracted, summarize
from router.types import JsonRpcId

__all__ = ["WorkerAnswer", "answer_of", "encode", "read_answer", "reframed"]


@dataclass(frozen=True, slots=True)
class WorkerAnswer:
    """One answer: the message as parsed, its members, and for a tool call's result object the
    summary of its text (``facts``: page URL and title, tabs, snapshot, console, the signs of a
    crashed page)."""

    message: dict[str, Any]
    id: JsonRpcId
    result: Any  # the result member (None for an error)
    error: Any  # the error member (None for a result)
    is_error: bool  # a JSON-RPC error, or a result that says isError
    facts: Extracted | None  # a tools/call result object's summary; None for anything else


def read_answer(payload: bytes, request_id: JsonRpcId, *, tool_call: bool) -> WorkerAnswer | None:
    """``payload`` parsed, when it is the JSON-RPC answer (a result or an error) to ``request_id``;
    None for anything else (not JSON, a notification, a request of the worker's, another id)."""
    try:
        message = json.loads(payload)
    except ValueError:  # UnicodeDecodeError too
        return None
    if not isinstance(message, dict) or message.get("id") != request_id:
        return None
    return answer_of(message, tool_call=tool_call)


def answer_of(message: dict[str, Any], *, tool_call: bool) -> WorkerAnswer | None:
    """The summary of an answer already parsed (the router's own answers too); None when it has
    neither a result nor an error."""
    if "result" in message:
        result, error = message["result"], None
    elif "error" in message:
        result, error = None, message["error"]
    else:
        return None
    is_error = error is not None or (isinstance(result, dict) and result.get("isError") is True)
    facts = summarize(result) if tool_call and isinstance(result, dict) else None
    return WorkerAnswer(message, message.get("id"), result, error, is_error, facts)


def encode(value: Any) -> bytes:
    """JSON as the router writes it: compact UTF-8 (escaped ASCII only for text UTF-8 cannot carry:
    a lone surrogate, valid in JSON, from a page)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def reframed(message: dict[str, Any], key: str, value_json: bytes) -> bytes:
    """``message`` serialised with its member ``key`` given as JSON already encoded (the record
    keeps the same bytes: the value is encoded once); other members keep their order, ``key``
    comes last."""
    rest = encode({name: value for name, value in message.items() if name != key})
    separator = b"," if len(rest) > 2 else b""
    return b"".join((rest[:-1], separator, encode(key), b":", value_json, b"}"))
