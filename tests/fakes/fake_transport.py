"""A fake socket for the router's upstream client: the test plays the worker.

``FakeWorkerLink.install(loop)`` makes the loop's ``create_connection`` hand the client a
``FakeTransport`` instead of a socket; the test reads what the client wrote (``written``) and
answers with raw HTTP bytes (``answer``), in as many pieces and at whatever moment it likes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class FakeTransport(asyncio.Transport):
    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.loop = loop
        self.protocol = protocol
        self.written = bytearray()
        self.closing = False
        self.reading = True

    # the client's side

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closing, "a write on a closed socket"
        self.written += data

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.loop.call_soon(self.protocol.connection_lost, None)

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    # the worker's side

    def answer(self, data: bytes) -> None:
        self.protocol.data_received(data)

    def hang_up(self) -> None:
        """The worker closes the socket."""
        if not self.closing:
            self.closing = True
            self.protocol.connection_lost(None)

    def take_written(self) -> bytes:
        data, self.written = bytes(self.written), bytearray()
        return data


@dataclass
class FakeWorkerLink:
    """Every connection the client opens, in order; ``refuse`` makes the next connects fail."""

    transports: list[FakeTransport] = field(default_factory=list)
    refuse: OSError | None = None

    def install(self, loop: asyncio.AbstractEventLoop, monkeypatch: Any) -> None:
        async def create_connection(factory: Callable[[], asyncio.Protocol], *_a: Any, **_k: Any) -> Any:
            if self.refuse is not None:
                raise self.refuse
            protocol = factory()
            transport = FakeTransport(loop, protocol)
            protocol.connection_made(transport)
            self.transports.append(transport)
            return transport, protocol

        monkeypatch.setattr(loop, "create_connection", create_connection)

    @property
    def last(self) -> FakeTransport:
        return self.transports[-1]
