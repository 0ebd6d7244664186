"""The request head is bounded: size, field count and the time to send it."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from router.http.limits import (
    HEADER_TIMEOUT_S,
    MAX_CONCURRENCY,
    MAX_HEADERS,
    MIN_CONCURRENCY,
    concurrency_limit,
    limited_protocol,
    raise_open_files_limit,
)
from tests.support import FAKE_WORKER, ROOT, asgi_in_thread, read_until_closed, spare_port, wait_for

HEAD_LIMIT = 16 * 1024
FIELDS_LIMIT = 20
TIMEOUT = 0.5
# A closed connection is noticed well within this; an open one is held for ever.
CLOSE_WAIT = 5.0
TRICKLE_EVERY = 0.5
PATIENT_TIMEOUT = 60.0
ENDLESS_PIECE = 4096
ENDLESS_BYTES = 1024 * 1024  # sent without ever ending the field: ~64 times the limit


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": f"ok {len(body)}".encode()})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    protocol = limited_protocol(
        max_head_bytes=HEAD_LIMIT, max_headers=FIELDS_LIMIT, header_timeout=TIMEOUT, body_timeout=TIMEOUT
    )
    with asgi_in_thread(_ok, http=protocol) as port:
        yield port


@pytest.fixture(scope="module")
def patient_port() -> Iterator[int]:
    """A header timeout far past CLOSE_WAIT: a connection closed within it was refused for size."""
    protocol = limited_protocol(max_head_bytes=HEAD_LIMIT, max_headers=FIELDS_LIMIT, header_timeout=PATIENT_TIMEOUT)
    with asgi_in_thread(_ok, http=protocol) as port:
        yield port


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(CLOSE_WAIT)
    return s


def _send_quietly(s: socket.socket, data: bytes) -> None:
    # The server may refuse and close mid-send: what is checked is its answer.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        s.sendall(data)


def test_a_normal_request_and_a_big_body_pass(port: int) -> None:
    with _connect(port) as s:
        body = b"x" * (4 * 1024 * 1024)  # the body is not the head: never counted here
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        answer = read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 200") and b"ok %d" % len(body) in answer


def test_an_8_mb_header_gets_431_and_a_closed_connection(port: int) -> None:
    with _connect(port) as s:
        _send_quietly(s, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (8 * 1024 * 1024) + b"\r\n\r\n")
        try:
            answer = read_until_closed(s)
        except ConnectionResetError:
            answer = b""  # closed with unread data: a reset is a refusal too
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431")


def test_one_endless_header_value_is_refused_for_its_size_before_it_ends(patient_port: int) -> None:
    """httptools hands a field over only once it ends, so a value that never ends was buffered
    whole until the header timeout: a hostile local process could make the router hold
    gigabytes. What a head keeps sending is counted as it arrives."""
    with _connect(patient_port) as s:
        _send_quietly(s, b"GET / HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        for _ in range(ENDLESS_BYTES // ENDLESS_PIECE):
            try:
                s.sendall(b"a" * ENDLESS_PIECE)
            except (BrokenPipeError, ConnectionResetError):
                break  # refused and closed mid-value
        try:
            answer = read_until_closed(s)  # a socket timeout here: still held open, still buffering
        except ConnectionResetError:
            answer = b""
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:200]


def test_one_endless_trailer_value_is_refused_for_its_size(patient_port: int) -> None:
    """The same after a chunked body: a trailer field joins the header list, and is buffered
    whole as well until it ends."""
    with _connect(patient_port) as s:
        head = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        _send_quietly(s, head + b"3\r\nabc\r\n0\r\nX-Endless: ")
        for _ in range(ENDLESS_BYTES // ENDLESS_PIECE):
            try:
                s.sendall(b"a" * ENDLESS_PIECE)
            except (BrokenPipeError, ConnectionResetError):
                break
        try:
            answer = read_until_closed(s)
        except ConnectionResetError:
            answer = b""
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:200]


def test_trailer_fields_count_with_the_head(port: int) -> None:
    trailers = b"".join(b"X-T%d: v\r\n" % i for i in range(FIELDS_LIMIT + 5))
    with _connect(port) as s:
        head = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        _send_quietly(s, head + b"3\r\nabc\r\n0\r\n" + trailers + b"\r\n")
        assert read_until_closed(s).startswith(b"HTTP/1.1 431")


def test_pipelined_requests_across_reads_are_not_counted_as_one_head(port: int) -> None:
    """A read that ends one request's head, carries its whole body and begins the next head:
    nothing of it is the next head's but that beginning."""
    body = b"x" * (4 * HEAD_LIMIT)
    first = b"POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    second = b"GET /two HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with _connect(port) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(first[:20])
        s.sendall(first[20:] + body + second[:10])
        s.sendall(second[10:])
        answer = read_until_closed(s)
    assert answer.count(b"HTTP/1.1 200") == 2, answer[:300]
    assert b"ok %d" % len(body) in answer


def test_a_long_url_counts_towards_the_head(port: int) -> None:
    with _connect(port) as s:
        _send_quietly(s, b"GET /" + b"u" * (2 * HEAD_LIMIT) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_until_closed(s).startswith(b"HTTP/1.1 431")


def test_too_many_header_fields_get_431(port: int) -> None:
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(FIELDS_LIMIT + 5))
    with _connect(port) as s:
        _send_quietly(s, b"GET / HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
        answer = read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 431")
    assert _json_rpc_error(answer)["code"] == -32600


@pytest.mark.parametrize(
    "head",
    [
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nMcp-Session-Id: a\x01b\r\n\r\n",
        b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_an_unparsable_request_gets_400_with_a_json_rpc_error(port: int, head: bytes) -> None:
    with _connect(port) as s:
        _send_quietly(s, head)
        answer = read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"content-type: application/json" in answer.lower()
    assert _json_rpc_error(answer)["code"] == -32600


def _json_rpc_error(answer: bytes) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    return error


def test_a_trickled_header_is_cut_off(port: int) -> None:
    with _connect(port) as s:
        started = time.monotonic()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        closed = False
        answer = b""
        for _ in range(int(CLOSE_WAIT / 0.05)):
            try:
                s.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            s.settimeout(0.05)
            try:
                chunk = s.recv(1024)
            except TimeoutError:
                continue
            except ConnectionResetError:  # cut off while our last byte was unread: a reset, not a FIN
                closed = True
                break
            answer += chunk
            if not chunk:
                closed = True
                break
        assert closed or answer, "a trickled header held the connection"
        assert time.monotonic() - started < TIMEOUT + 3
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408")


def test_a_trickled_body_gets_408_with_a_json_rpc_error_and_a_closed_connection(port: int) -> None:
    """The head arrived whole, the body never does: the request held the connection for ever."""
    with _connect(port) as s:
        started = time.monotonic()
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        answer = read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["jsonrpc"] == "2.0" and "did not arrive" in body["error"]["message"]
    assert time.monotonic() - started < CLOSE_WAIT


def test_a_body_in_pieces_within_its_deadline_passes(port: int) -> None:
    with _connect(port) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\n12345")
        time.sleep(TIMEOUT / 3)  # the pause is the scenario: a body in two reads, within the deadline
        s.sendall(b"67890")
        answer = read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 200") and b"ok 10" in answer, answer


def test_a_silent_connection_is_closed(port: int) -> None:
    with _connect(port) as s:
        assert read_until_closed(s) == b""


def test_keep_alive_requests_each_get_their_own_deadline(port: int) -> None:
    with _connect(port) as s:
        for _ in range(3):
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = s.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer
            time.sleep(TIMEOUT * 0.6)  # idles between requests, each within the deadline


def test_concurrency_follows_the_open_files_limit() -> None:
    assert concurrency_limit(1024) == (1024 - 256) // 2
    assert concurrency_limit(100) == MIN_CONCURRENCY
    assert concurrency_limit(10**7) == MAX_CONCURRENCY
    assert raise_open_files_limit(1) >= 1  # never lowers it


def test_serve_bounds_the_request_head(state_dir: Path) -> None:
    port = spare_port()
    argv = [
        sys.executable, "-m", "router.cli", "serve", "--port", str(port), "--state-dir", str(state_dir),
        "--worker-command", f"{sys.executable} {FAKE_WORKER} {{port}}",
    ]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: proc.poll() is not None or _answers(port))
        assert proc.poll() is None
        with _connect(port) as s:
            _send_quietly(s, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (8 * 1024 * 1024)
                          + b"\r\n\r\n")
            try:
                answer = read_until_closed(s)
            except ConnectionResetError:
                answer = b""
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431")
        fields = b"".join(b"X-F%d: v\r\n" % i for i in range(MAX_HEADERS + 1))
        with _connect(port) as s:
            _send_quietly(s, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields + b"\r\n")
            assert read_until_closed(s).startswith(b"HTTP/1.1 431")
        assert _answers(port)  # and it still serves
        assert _trickle_cut_off_after(port) < HEADER_TIMEOUT_S + CLOSE_WAIT
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _answers(port: int) -> bool:
    try:
        with _connect(port) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return read_until_closed(s).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def _trickle_cut_off_after(port: int) -> float:
    """Seconds until the router cuts a connection that sends its head one byte at a time."""
    with _connect(port) as s:
        started = time.monotonic()
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        s.settimeout(TRICKLE_EVERY)
        while time.monotonic() - started < HEADER_TIMEOUT_S + CLOSE_WAIT:
            try:
                s.sendall(b"X")
                if not s.recv(1024):
                    break
            except TimeoutError:
                continue  # still open: the next byte
            except OSError:
                break
        return time.monotonic() - started
