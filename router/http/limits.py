"""HTTP/1 limits uvicorn does not offer with its fast parser: the size and count of a request's
header fields, and the time a client may take to send them.

uvicorn with httptools accepts an 8 MB header and keeps a connection that trickles its header, or
sends nothing at all, open for ever; h11 caps the header size (``h11_max_incomplete_event_size``)
but parses several times slower. So the router keeps httptools and counts in the parser's own
callbacks: the request line and header fields, a chunked body's trailer fields too (they join the
same header list), never the body (the endpoint caps that). httptools hands a field over only
once it ends, so one that never ends would be buffered whole: a read in which the parser
delivered nothing at all (no field, no body bytes, no message event) counts as well, until
something is delivered. A request past a limit gets ``431`` and the connection is closed; a head
not complete within the timeout gets ``408`` or, if nothing was sent at all, a plain close. The
timeout counts from the connection's opening, and on a kept-alive connection from the first byte
of each later request (uvicorn's keep-alive timeout bounds the idle time in between). A body not
whole within its own timeout of the head's end gets ``408`` (a JSON-RPC error) and a close: a
client that trickled its body held a request and a connection for ever. Its timer is armed only
when a read ends inside a body, so a request that arrives in one read costs no timer at all.

The connection cap is uvicorn's ``limit_concurrency`` (``503`` past it), sized from the open-file
limit: each request holds the client's socket and one to its worker.
"""

from __future__ import annotations

import asyncio
import http
import resource
from typing import Any, Final, NoReturn

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from router.errors import INVALID_REQUEST, error_body

__all__ = [
    "BODY_TIMEOUT_S", "HEADER_TIMEOUT_S", "MAX_HEADERS", "MAX_HEAD_BYTES", "concurrency_limit", "limited_protocol",
    "raise_open_files_limit",
]

MAX_HEAD_BYTES: Final = 64 * 1024  # request line and header fields together
MAX_HEADERS: Final = 100
HEADER_TIMEOUT_S: Final = 10.0
BODY_TIMEOUT_S: Final = 30.0  # at most max_body_bytes (4 MiB) from a local client: generous
# An idle kept-alive connection stays open this long. uvicorn's default (5 s) equals httpx's own
# keep-alive expiry (the MCP python-sdk's client): a client reusing its connection just as the
# router closed it lost that request (a ReadError in scripts/bench at 20 sessions). Longer than
# common clients keep an idle connection (httpx 5 s, undici 4 s, aiohttp 15 s), as nginx's 75 s.
KEEP_ALIVE_TIMEOUT_S: Final = 75
# Descriptors kept for the router itself (database, logs, worker pipes) before counting requests.
RESERVED_FDS: Final = 256
FDS_PER_REQUEST: Final = 2
MIN_CONCURRENCY: Final = 64
MAX_CONCURRENCY: Final = 4096
WANTED_OPEN_FILES: Final = 65536
_HEADER_OVERHEAD: Final = 4  # ": " and CRLF


class _HeadTooLarge(Exception):
    """Raised inside a parser callback: httptools stops parsing, uvicorn answers the client."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded request head. Limits are class attributes, set
    by ``limited_protocol`` (uvicorn builds the protocol from its class alone)."""

    max_head_bytes: int = MAX_HEAD_BYTES
    max_headers: int = MAX_HEADERS
    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # fields delivered (request line, headers, trailers)
        self._head_fields = 0
        self._pending = 0  # reads since the parser last delivered anything: a field not yet ended
        self._delivered = False  # during a read: the parser delivered something
        self._in_message = False  # between a message's first byte and its end
        self._head_started = False  # ... and until its response is complete
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_body = False  # between a head's end and its message's end
        self._body_timer: asyncio.TimerHandle | None = None
        self._refusal: http.HTTPStatus | None = None

    # -- connection --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # answered and closing: the rest is not parsed
        self._delivered = False
        super().data_received(data)
        if self._in_body and self._body_timer is None and self._refusal is None:
            self._body_timer = self.loop.call_later(self.body_timeout, self._body_timed_out)
        if self._delivered or not self._in_message or self._refusal is not None or self.transport.is_closing():
            return
        self._pending += len(data)  # all of this read went into something not yet ended
        if self._head_bytes + self._pending > self.max_head_bytes:
            self._refusal = http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
            self._cancel_head_timer()
            self._send_and_close(self._refusal)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head_started = False

    # -- parser callbacks ----------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._head_fields = 0
        self._got_something()
        self._in_message = self._head_started = True
        if self._head_timer is None:  # a keep-alive connection's next request
            self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._got_something()
        self._count(len(url), 0)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        # _got_something and _count written out: this runs for every field of every request.
        self._delivered = True
        self._pending = 0
        self._head_bytes += len(name) + len(value) + _HEADER_OVERHEAD
        self._head_fields += 1
        if self._head_bytes > self.max_head_bytes or self._head_fields > self.max_headers:
            self._refuse_head()
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._got_something()
        self._cancel_head_timer()
        self._in_body = True
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._got_something()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._got_something()
        self._in_message = self._in_body = False
        if self._body_timer is not None:
            self._cancel_body_timer()
        super().on_message_complete()

    # -- limits ------------------------------------------------------------------------------------

    def _got_something(self) -> None:
        self._delivered = True
        self._pending = 0

    def _count(self, size: int, fields: int) -> None:
        self._head_bytes += size
        self._head_fields += fields
        if self._head_bytes > self.max_head_bytes or self._head_fields > self.max_headers:
            self._refuse_head()

    def _refuse_head(self) -> NoReturn:
        self._refusal = http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
        raise _HeadTooLarge

    def send_400_response(self, msg: str) -> None:
        # uvicorn's answer to any parser error (its own is plain text); a refused head gets its
        # own status instead.
        self._cancel_head_timer()
        if self._refusal is None:
            self._send_and_close(http.HTTPStatus.BAD_REQUEST, msg)
            return
        self._send_and_close(self._refusal)

    def _send_and_close(self, status: http.HTTPStatus, message: str | None = None) -> None:
        """The refusal as every bad request gets one: a JSON-RPC error body."""
        body = error_body(INVALID_REQUEST, message or status.phrase)
        head = [f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode()]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        _cancel(self._head_timer)
        self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_started:
            self._refusal = http.HTTPStatus.REQUEST_TIMEOUT
            self._send_and_close(self._refusal)
        else:
            self.transport.close()

    def _cancel_body_timer(self) -> None:
        _cancel(self._body_timer)
        self._body_timer = None

    def _body_timed_out(self) -> None:
        """The app waits in ``receive`` for the rest: the close tells it the client is gone."""
        self._body_timer = None
        if self.transport.is_closing() or not self._in_body:
            return
        self._refusal = http.HTTPStatus.REQUEST_TIMEOUT
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # an app that answered before reading it all: nothing to add
            return
        self._send_and_close(self._refusal, f"Request Timeout: the body did not arrive within {self.body_timeout:g} s")


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()


def limited_protocol(
    *, max_head_bytes: int = MAX_HEAD_BYTES, max_headers: int = MAX_HEADERS,
    header_timeout: float = HEADER_TIMEOUT_S, body_timeout: float = BODY_TIMEOUT_S,
) -> type[LimitedHttpToolsProtocol]:
    """The protocol class to pass as uvicorn's ``http``."""
    limits = {"max_head_bytes": max_head_bytes, "max_headers": max_headers, "header_timeout": header_timeout,
              "body_timeout": body_timeout}  # fmt: skip
    return type("Limited", (LimitedHttpToolsProtocol,), limits)


def raise_open_files_limit(wanted: int = WANTED_OPEN_FILES) -> int:
    """Lift the soft open-files limit towards ``wanted`` (never above the hard limit, never down);
    returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return soft


def concurrency_limit(open_files: int) -> int:
    """Connections and requests at once, past which uvicorn answers 503 rather than running out
    of descriptors (EMFILE would fail every worker spawn and database write too)."""
    if open_files == resource.RLIM_INFINITY:
        return MAX_CONCURRENCY
    return max(MIN_CONCURRENCY, min(MAX_CONCURRENCY, (open_files - RESERVED_FDS) // FDS_PER_REQUEST))
