"""Session id → worker port, with collision probing.

The port is derived from the session id so that a restarted router (or a human reading logs)
finds the same worker port for the same id; probing only moves it when something else holds it.
"""

from __future__ import annotations

import hashlib
import random
import socket
import threading
from collections.abc import Callable, Collection
from pathlib import Path

import anyio

from ._exceptions import NoPortAvailable

__all__ = ["PORT_MIN", "PORT_SPAN", "PortAllocator", "accepts", "derive_port", "port_is_bindable", "spare_port"]

PORT_MIN, PORT_SPAN = 20000, 20000
LOOPBACK = "127.0.0.1"
SPARE_PORT_TRIES = 50
SPARE_PORT_LOW = 10000  # below: ports services commonly listen on
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL = (32768, 60999)


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


def ephemeral_ports() -> range:
    """The kernel's range for the source ports of outgoing connections (Linux's default where
    unreadable)."""
    try:
        low, high = (int(v) for v in Path(EPHEMERAL_RANGE_FILE).read_text().split())
    except (OSError, ValueError):
        low, high = DEFAULT_EPHEMERAL
    return range(low, high + 1)


def spare_port(host: str = LOOPBACK) -> int:
    """A free port on ``host`` for a server started beside routers (the tests' own, the
    benchmarks'): outside the workers' range, which a worker could derive by the time the server
    binds it, and outside the ephemeral range, which any outgoing connection could take as its
    source port between this check and that bind (seen in CI, with two test processes busy)."""
    ephemeral = ephemeral_ports()
    candidates: list[int] = [
        port for port in (*range(SPARE_PORT_LOW, PORT_MIN), *range(PORT_MIN + PORT_SPAN, 65536))
        if port not in ephemeral
    ]  # fmt: skip
    for port in random.SystemRandom().sample(candidates, min(SPARE_PORT_TRIES, len(candidates))):
        if port_is_bindable(port, host):
            return port
    raise OSError(f"no free port on {host} outside {PORT_MIN}-{PORT_MIN + PORT_SPAN - 1} and {ephemeral}")


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
