"""Session id → worker port, with collision probing.

The port is derived from the session id so that a restarted router (or a human reading logs)
finds the same worker port for the same id; probing only moves it when something else holds it.
"""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Callable, Collection

import anyio

from ._exceptions import NoPortAvailable

__all__ = ["PORT_MIN", "PORT_SPAN", "PortAllocator", "accepts", "derive_port", "port_is_bindable", "spare_port"]

PORT_MIN, PORT_SPAN = 20000, 20000
LOOPBACK = "127.0.0.1"
SPARE_PORT_TRIES = 50


def derive_port(session_id: str, port_min: int = PORT_MIN, span: int = PORT_SPAN) -> int:
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()
    return port_min + int(digest[:4], 16) % span


async def accepts(port: int, host: str = LOOPBACK) -> bool:
    """True when something accepts a TCP connection on ``host:port`` now. No timeout of its own:
    loopback refuses or accepts at once unless the listener is wedged, which callers bound."""
    try:
        stream = await anyio.connect_tcp(host, port)
    except OSError:
        return False
    await stream.aclose()
    return True


def port_is_bindable(port: int, host: str = LOOPBACK) -> bool:
    """True when we could bind ``host:port`` right now.

    SO_REUSEADDR stays off on purpose: that makes the probe stricter than the worker's own bind
    (libuv sets it), so a port that passes here will not fail there for the same reason.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def spare_port(host: str = LOOPBACK) -> int:
    """A free port on ``host`` outside the workers' range, for a server started beside routers
    (the tests' own, the benchmarks'). Linux's ephemeral ports (32768-60999) overlap the range,
    and a port picked there, free when asked, could be a worker's by the time the server binds
    it, or the server's by the time a worker derives it."""
    for _ in range(SPARE_PORT_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if not PORT_MIN <= port < PORT_MIN + PORT_SPAN:
            return port
    for port in range(PORT_MIN + PORT_SPAN, 65536):  # an ephemeral range inside the workers' own
        if port_is_bindable(port, host):
            return port
    raise OSError(f"no free port on {host} outside {PORT_MIN}-{PORT_MIN + PORT_SPAN - 1}")


class PortAllocator:
    """Hands out ports to live sessions; one per supervisor, no module state.

    A lock (not asyncio) guards the table because the bind probe is synchronous and cheap, and a
    threading lock keeps it correct whether callers are coroutines or threads.
    """

    def __init__(
        self,
        *,
        port_min: int = PORT_MIN,
        span: int = PORT_SPAN,
        is_free: Callable[[int], bool] = port_is_bindable,
    ) -> None:
        if span <= 0:
            raise ValueError("span must be positive")
        self._min = port_min
        self._span = span
        self._is_free = is_free
        self._held: dict[int, str] = {}
        self._lock = threading.Lock()

    def allocate(self, session_id: str, *, exclude: Collection[int] = ()) -> int:
        """The derived port, or the next one onward (wrapping) that is neither held nor busy.

        ``exclude`` lets a caller skip a port that just failed at the worker's own bind.
        """
        start = derive_port(session_id, self._min, self._span) - self._min
        with self._lock:
            for step in range(self._span):
                port = self._min + (start + step) % self._span
                if port in self._held or port in exclude:
                    continue
                if not self._is_free(port):
                    continue
                self._held[port] = session_id
                return port
        raise NoPortAvailable(
            f"no free port in {self._min}-{self._min + self._span - 1}", session_id=session_id
        )

    def release(self, port: int) -> None:
        with self._lock:
            self._held.pop(port, None)

    def held(self) -> dict[int, str]:
        """A copy of port → session id, for diagnostics."""
        with self._lock:
            return dict(self._held)
