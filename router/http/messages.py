"""One JSON-RPC message from a client: parsed once, classified, validated."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from router.http.errors import BadRequest, ParseError
from router.types import JsonObject, JsonRpcId


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
    if isinstance(body, list):
        # Batches were removed in 2025-06-18; a router cannot split one across session semantics.
        raise BadRequest("Invalid Request: JSON-RPC batches are not supported")
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        raise BadRequest("Invalid Request: expected one JSON-RPC 2.0 object")
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


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
