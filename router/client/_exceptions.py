"""What `router.client` raises, as one tree (like httpx's):

    RouterError                  anything this client raises about the router or a call
    ├── InvalidArgument          caught before sending (also a ValueError): a relative URL, an
    │                            empty target, a timeout outside 1 ms–10 min, an unknown level
    ├── ConnectionFailed         the router could not be reached (refused, reset, no such host)
    ├── CallTimeout              no answer within the call's timeout
    ├── SessionExpired           404: the session was ended (DELETE, retention, `sessions --end`)
    ├── ServiceBusy              503 / 429: at capacity or cannot start a browser; `retry_after`
    ├── ToolFailed               the tool answered `isError`: `text` is the tool's own message
    └── RequestRejected          any other error answer (401 wrong token, 400, 502): `status`, `code`

Only `SessionExpired` means the conversation's browser is gone; after `ServiceBusy` and
`CallTimeout` the same session can be called again.
"""

from __future__ import annotations


class RouterError(Exception):
    """Base of every error `router.client` raises; ``message`` is the human-readable reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(RouterError, ValueError):
    """An argument was refused before anything was sent."""


class ConnectionFailed(RouterError):
    """The router's endpoint could not be reached or the connection broke."""


class CallTimeout(RouterError):
    """The call got no answer within ``timeout`` seconds (the router may still be running it)."""

    def __init__(self, message: str, *, timeout: float) -> None:
        super().__init__(message)
        self.timeout = timeout


class SessionExpired(RouterError):
    """The router no longer knows this session (404): its browser and state are gone."""

    def __init__(self, message: str, *, session_id: str | None) -> None:
        super().__init__(message)
        self.session_id = session_id


class ServiceBusy(RouterError):
    """The router cannot serve now (503, or 429 for too many new sessions); try again after
    ``retry_after`` seconds (None when the router did not say)."""

    def __init__(self, message: str, *, status: int, retry_after: float | None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class ToolFailed(RouterError):
    """The tool ran and reported an error (``isError``); ``text`` is its answer, ``tool`` its name."""

    def __init__(self, message: str, *, tool: str, text: str, ref_id: str | None) -> None:
        super().__init__(message)
        self.tool = tool
        self.text = text
        self.ref_id = ref_id


class RequestRejected(RouterError):
    """Any other error answer: ``status`` is the HTTP status (None when the error came inside a
    successful answer), ``code`` the JSON-RPC error code."""

    def __init__(self, message: str, *, status: int | None, code: int | None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
