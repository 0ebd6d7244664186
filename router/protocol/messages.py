"""One JSON-RPC message from a client: parsed once, classified, validated."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from router.errors import BadRequest, ParseError
from router.types import JsonObject, JsonRpcId

# MCP messages are shallow (a tools/call's arguments are a few levels in); the record, session.json
# and the worker all recurse over a message, and CPython's own limit sits near 1000 levels.
MAX_JSON_DEPTH: Final = 64
# A lone surrogate (\uD800-\uDFFF) is valid JSON syntax but not Unicode text: nothing can encode
# it as UTF-8, so the record, the API and the worker would each fail on it later. It comes from an
# escape or from its own bytes (json.loads decodes bytes with "surrogatepass"), so a body with
# neither a backslash nor the byte 0xED (which leads every surrogate's UTF-8) holds none.
TOO_DEEP: Final = f"Invalid Request: JSON nested deeper than {MAX_JSON_DEPTH} levels"
# Below this many bytes counting brackets is quicker than searching for them one by one.
COUNT_BELOW: Final = 1024
NOT_TEXT: Final = "Parse error: a string holds a lone UTF-16 surrogate (not Unicode text)"


class Kind(Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


@dataclass(frozen=True, slots=True)
class ClientMessage:
    kind: Kind
    body: JsonObject
    raw: bytes
    # Read from ``body`` once: the proxy path asks for them a few dozen times per request.
    id: JsonRpcId = field(init=False)
    method: str | None = field(init=False)
    params: JsonObject = field(init=False)
    tool_name: str | None = field(init=False)

    def __post_init__(self) -> None:
        body = self.body
        value, method, params = body.get("id"), body.get("method"), body.get("params")
        method = method if isinstance(method, str) else None
        params = params if isinstance(params, dict) else {}
        name = params.get("name") if method == "tools/call" else None
        object.__setattr__(self, "id", value if isinstance(value, str | int) and not isinstance(value, bool) else None)
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "tool_name", name if isinstance(name, str) else None)


def parse(raw: bytes) -> ClientMessage:
    try:
        body: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"Parse error: {exc}") from None
    except RecursionError:
        raise BadRequest(TOO_DEEP) from None
    if isinstance(body, list):
        # Batches were removed in 2025-06-18; a router cannot split one across session semantics.
        raise BadRequest("Invalid Request: JSON-RPC batches are not supported")
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        raise BadRequest("Invalid Request: expected one JSON-RPC 2.0 object")
    # The walk only when the bytes could hold what it looks for, found by single-byte searches
    # (memchr: ~10 us for 600 KB, where a count, a two-byte search or a regex over the bytes cost
    # 0.4-1.6 ms, as much as json.loads); the walk skips ASCII strings at no cost.
    text = b"\\" in raw or b"\xed" in raw
    if text or _brackets_past(raw, MAX_JSON_DEPTH):
        _check_content(body, text=text)
    has_id = "id" in body
    if has_id and not _valid_id(body["id"]):
        raise BadRequest("Invalid Request: id must be a string or an integer")
    if "method" in body:
        if not isinstance(body["method"], str):
            raise BadRequest("Invalid Request: method must be a string")
        if "params" in body and not isinstance(body["params"], dict | list):
            raise BadRequest("Invalid Request: params must be an object")
        return ClientMessage(Kind.REQUEST if has_id else Kind.NOTIFICATION, body, raw)
    if has_id and ("result" in body or "error" in body):
        return ClientMessage(Kind.RESPONSE, body, raw)
    raise BadRequest("Invalid Request: neither a request, a notification nor a response")


def initialize_problem(params: JsonObject) -> str | None:
    """What the worker would refuse in these ``initialize`` params (its SDK answers -32602), or
    None. Checked before the router answers from its cache: otherwise the handshake would
    succeed and every later call fail when the worker is given it."""
    if not isinstance(params.get("protocolVersion"), str):
        return "protocolVersion must be a string"
    if not isinstance(params.get("capabilities"), dict):
        return "capabilities must be an object"
    info = params.get("clientInfo")
    if not isinstance(info, dict) or not isinstance(info.get("name"), str) or not isinstance(info.get("version"), str):
        return "clientInfo must be an object with a name and a version"
    return None


def _brackets_past(raw: bytes, limit: int) -> bool:
    """Whether ``raw`` holds more than ``limit`` opening brackets: the least a body nested deeper
    needs. A short body is counted; a longer one searched (memchr), stopping at ``limit`` + 1."""
    if len(raw) < COUNT_BELOW:
        return raw.count(b"{") + raw.count(b"[") > limit
    found = 0
    for bracket in (b"{", b"["):
        at = raw.find(bracket)
        while at != -1:
            found += 1
            if found > limit:
                return True
            at = raw.find(bracket, at + 1)
    return False


def _check_content(body: Any, *, text: bool) -> None:
    """Raises for a value nested deeper than MAX_JSON_DEPTH or, with ``text``, for a string or key
    holding a lone surrogate. Level by level, containers only: the value may be nested as deep as
    json.loads allows, and a form of a few hundred fields is walked in tens of microseconds."""
    level, depth = [body], 1
    while level:
        if depth > MAX_JSON_DEPTH:
            raise BadRequest(TOO_DEEP)
        below: list[Any] = []
        for value in level:
            if type(value) is dict:
                if text:
                    for key in value:
                        if not key.isascii():  # O(1): CPython keeps the flag
                            _check_text(key)
                children = value.values()
            else:
                children = value
            for child in children:
                kind = type(child)  # json.loads makes exactly dict, list, str, int, float, bool, None
                if kind is dict or kind is list:
                    below.append(child)
                elif text and kind is str and not child.isascii():
                    _check_text(child)
        level, depth = below, depth + 1


def _check_text(value: str) -> None:
    try:
        value.encode()  # a C loop; a regex for the surrogate range is several times slower
    except UnicodeEncodeError:
        raise ParseError(NOT_TEXT) from None


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
