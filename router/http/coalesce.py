"""A transport that sends what one turn of the event loop wrote in one system call.

uvicorn writes a response's head and its body separately, so every answer the router relays cost
two ``send`` calls on the client's socket (three for a chunked answer's last piece). Gathering the
writes of one loop turn and flushing them once, at the start of the next turn, halves that; nothing
waits longer than the turn that wrote it, so a streamed event still leaves as soon as it is written.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

__all__ = ["FLUSH_AT", "CoalescingTransport"]

# Gathered bytes past this leave at once: uvicorn's ``send`` waits only once the real transport
# has paused its writer, so a big body held here for the turn would never pause it, and a client
# that does not read would make the router hold all of it.
FLUSH_AT: Final = 64 * 1024


class CoalescingTransport:
    """Wraps a connected transport: ``write`` gathers, a ``call_soon`` flushes. ``close`` and
    ``write_eof`` flush first; ``abort`` drops what is gathered, as the real one drops its buffer.
    Everything else is the wrapped transport's own."""

    def __init__(self, transport: asyncio.BaseTransport, loop: asyncio.AbstractEventLoop) -> None:
        # uvloop's transports are not asyncio.Transport instances, so this is typed loosely.
        self._transport: Any = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0
        self._scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._pending.append(bytes(data))
        self._size += len(data)
        if self._size >= FLUSH_AT:
            self.flush()
            return
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._turn_ended)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def _turn_ended(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        """Send what is gathered now (at the turn's end, past FLUSH_AT, or before a close)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._size = 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._size + int(self._transport.get_write_buffer_size())

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._size = 0
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
