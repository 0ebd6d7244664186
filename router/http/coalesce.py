"""A transport that sends what one turn of the event loop wrote in one system call.

uvicorn writes a response's head and its body separately, so every answer the router relays cost
two ``send`` calls on the client's socket (three for a chunked answer's last piece). Gathering the
writes of one loop turn and flushing them once, at the start of the next turn, halves that; nothing
waits longer than the turn that wrote it, so a streamed event still leaves as soon as it is written.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CoalescingTransport"]


class CoalescingTransport:
    """Wraps a connected transport: ``write`` gathers, a ``call_soon`` flushes. ``close`` and
    ``write_eof`` flush first; ``abort`` drops what is gathered, as the real one drops its buffer.
    Everything else is the wrapped transport's own."""

    def __init__(self, transport: asyncio.BaseTransport, loop: asyncio.AbstractEventLoop) -> None:
        # uvloop's transports are not asyncio.Transport instances, so this is typed loosely.
        self._transport: Any = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._scheduled = False

    @property
    def wrapped(self) -> asyncio.BaseTransport:
        transport: asyncio.BaseTransport = self._transport
        return transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._pending.append(bytes(data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Send what is gathered now (the scheduled flush, or before a close)."""
        self._scheduled = False
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return sum(map(len, self._pending)) + int(self._transport.get_write_buffer_size())

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
