"""A worker stand-in that answers with bytes the test writes: the proxy's edge cases at the socket.

``ScriptedWorker`` listens on loopback in a thread; each request it reads (head and a
``Content-Length`` body) gets the next answer from ``answers`` (raw bytes, sent as they are, or
``CLOSE`` to hang up without a word), else ``default``; a ``ThenClose`` answer hangs up after it;
an ``InParts`` answer is written piece by piece, ``gap`` seconds apart (a head before its body, as
a worker writes while its tool runs), its last piece held back until the test releases it if asked.
Requests are kept for assertions.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from types import TracebackType
from typing import Final

CLOSE: Final = b""
READ_TIMEOUT: Final = 10.0


class ThenClose(bytes):
    """An answer after which the worker hangs up (a body cut short, say)."""


class InParts(bytes):
    """An answer written in ``parts``, ``gap`` seconds apart; with ``release``, the last part waits
    for the test to set it (at most READ_TIMEOUT). ``sent`` is set once the last part is written."""

    parts: tuple[bytes, ...]
    gap: float
    release: threading.Event | None
    sent: threading.Event

    def __new__(cls, *parts: bytes, gap: float, release: threading.Event | None = None) -> InParts:
        answer = super().__new__(cls, b"".join(parts))
        answer.parts, answer.gap, answer.release, answer.sent = parts, gap, release, threading.Event()
        return answer


def http_answer(status: int, body: bytes, headers: dict[str, str] | None = None, *, chunked: bool = False) -> bytes:
    """A whole HTTP/1.1 response; ``chunked`` sends the body as one chunk and the terminator."""
    lines = [f"HTTP/1.1 {status} X"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if chunked:
        lines.append("transfer-encoding: chunked")
        framed = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n" if body else b"0\r\n\r\n"
    else:
        lines.append(f"content-length: {len(body)}")
        framed = body
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + framed


class ScriptedWorker:
    def __init__(self, default: bytes) -> None:
        self.default = default
        self.answers: deque[bytes] = deque()
        self.requests: list[bytes] = []
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ScriptedWorker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(READ_TIMEOUT)
        buffer = b""
        with conn:
            while not self._stop.is_set():
                try:
                    while b"\r\n\r\n" not in buffer:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buffer += data
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    length = _content_length(head)
                    while len(buffer) < length:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buffer += data
                    self.requests.append(head + b"\r\n\r\n" + buffer[:length])
                    buffer = buffer[length:]
                    answer = self.answers.popleft() if self.answers else self.default
                    if answer == CLOSE:
                        return
                    if isinstance(answer, InParts):
                        for i, part in enumerate(answer.parts):
                            if i:
                                self._stop.wait(answer.gap)  # the pace of the worker, not a sync
                            if answer.release is not None and i == len(answer.parts) - 1:
                                answer.release.wait(READ_TIMEOUT)
                            conn.sendall(part)
                        answer.sent.set()
                    else:
                        conn.sendall(answer)
                    if isinstance(answer, ThenClose):
                        return
                except OSError:
                    return


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0
