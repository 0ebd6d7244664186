"""Every way a request to the router can fail, as one tree, and the JSON-RPC body each one gets.

    RouterError                  status  JSON-RPC code
    ├── BadRequest                 400   -32600 invalid request / missing session id / batch
    │   ├── ParseError             400   -32700 body is not JSON
    │   ├── InvalidParams          400   -32602 initialize params the worker would refuse
    │   └── UnsupportedVersion     400   -32600 MCP-Protocol-Version we do not speak
    ├── Unauthorized               401   -32600 no token, or a wrong one (WWW-Authenticate: Bearer)
    ├── Forbidden                  403   -32600 Origin not allowed
    ├── SessionNotFound            404   -32001 unknown or ended session id
    ├── MethodNotAllowed           405   -32600
    ├── NotAcceptable              406   -32600 Accept lacks application/json or text/event-stream
    ├── PayloadTooLarge            413   -32600
    ├── UnsupportedMediaType       415   -32600
    ├── MisdirectedRequest         421   -32600 Host not allowed (DNS rebinding)
    │   └── WrongNode              421   -32600 the session id names another router node
    ├── WorkerUnreachable          502   -32603 the worker did not answer
    └── ServiceUnavailable         503   -32603 cannot spawn, at capacity, degraded (Retry-After)
        └── TooManyRequests        429   -32603 new sessions arriving faster than the limit (Retry-After)

Never 404 for a spawn or routing failure: clients treat 404 as "session gone" and re-initialize.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from starlette.responses import Response

from router.types import JsonRpcId

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SESSION_NOT_FOUND = -32001


def error_body(code: int, message: str, data: Any = None, id: JsonRpcId = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return json.dumps({"jsonrpc": "2.0", "id": id, "error": error}).encode()


class RouterError(Exception):
    """``request_id``: the JSON-RPC id of the request that failed, when it was read before the
    failure; the error body answers that id. Set at raise time or later by whoever knows it."""

    status: ClassVar[int] = 500
    code: ClassVar[int] = INTERNAL_ERROR
    request_id: JsonRpcId

    def __init__(
        self, message: str, *, data: Any = None, headers: dict[str, str] | None = None,
        request_id: JsonRpcId = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
        self.headers = headers or {}
        self.request_id = request_id

    def response(self, id: JsonRpcId = None) -> Response:
        """The error as an HTTP response; ``id`` overrides ``request_id``."""
        return Response(
            error_body(self.code, self.message, self.data, self.request_id if id is None else id),
            status_code=self.status,
            media_type="application/json",
            headers=self.headers,
        )


class BadRequest(RouterError):
    status = 400
    code = INVALID_REQUEST


class ParseError(BadRequest):
    code = PARSE_ERROR


class InvalidParams(BadRequest):
    code = INVALID_PARAMS


class UnsupportedVersion(BadRequest):
    pass


class Unauthorized(RouterError):
    status = 401
    code = INVALID_REQUEST

    def __init__(self, message: str, *, invalid: bool = False) -> None:
        # RFC 6750: "invalid_token" only when a credential was shown and was wrong.
        challenge = 'Bearer realm="mcp-router"' + (', error="invalid_token"' if invalid else "")
        super().__init__(message, headers={"WWW-Authenticate": challenge})


class Forbidden(RouterError):
    status = 403
    code = INVALID_REQUEST


class SessionNotFound(RouterError):
    status = 404
    code = SESSION_NOT_FOUND


class MethodNotAllowed(RouterError):
    status = 405
    code = INVALID_REQUEST


class NotAcceptable(RouterError):
    status = 406
    code = INVALID_REQUEST


class PayloadTooLarge(RouterError):
    status = 413
    code = INVALID_REQUEST


class UnsupportedMediaType(RouterError):
    status = 415
    code = INVALID_REQUEST


class MisdirectedRequest(RouterError):
    status = 421
    code = INVALID_REQUEST


class WrongNode(MisdirectedRequest):
    """The balancer sent a session to a node that does not own it (router/sessions/nodes.py)."""


class WorkerUnreachable(RouterError):
    status = 502
    code = INTERNAL_ERROR


class ServiceUnavailable(RouterError):
    status = 503
    code = INTERNAL_ERROR

    def __init__(
        self, message: str, *, data: Any = None, retry_after: int = 5, request_id: JsonRpcId = None
    ) -> None:
        super().__init__(message, data=data, headers={"Retry-After": str(retry_after)}, request_id=request_id)


class TooManyRequests(ServiceUnavailable):
    status = 429
