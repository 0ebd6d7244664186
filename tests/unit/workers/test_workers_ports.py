from __future__ import annotations

import asyncio
import hashlib
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from workers import ports
from workers._exceptions import NoPortAvailable, SpawnError
from workers.ports import PORT_MIN, PORT_SPAN, PortAllocator, derive_port, port_is_bindable, spare_port


def test_derive_port_known_values() -> None:
    # sha256("abc") starts with "ba78" = 47736; 47736 % 20000 = 7736
    assert derive_port("abc") == 27736
    for sid in ("", "x", "session-1", "ünï"):
        digest = hashlib.sha256(sid.encode()).hexdigest()
        assert derive_port(sid) == 20000 + int(digest[:4], 16) % 20000
        assert PORT_MIN <= derive_port(sid) < PORT_MIN + PORT_SPAN


def test_allocate_gives_derived_port_when_free() -> None:
    alloc = PortAllocator(is_free=lambda _p: True)
    assert alloc.allocate("abc") == 27736
    assert alloc.held() == {27736: "abc"}
    alloc.release(27736)
    assert alloc.held() == {}
    alloc.release(27736)  # idempotent


def test_collision_probes_onward() -> None:
    alloc = PortAllocator(is_free=lambda _p: True)
    assert alloc.allocate("abc") == 27736
    assert alloc.allocate("abc") == 27737  # same derived port, held by the first
    assert alloc.allocate("abc", exclude={27738}) == 27739


def test_wraps_around_the_range() -> None:
    sid = next(f"id{i}" for i in range(1_000_000) if derive_port(f"id{i}") == 39999)
    busy = {39999, 20000}
    alloc = PortAllocator(is_free=lambda p: p not in busy)
    assert alloc.allocate(sid) == 20001


def test_small_range_exhausted_raises() -> None:
    alloc = PortAllocator(port_min=30000, span=3, is_free=lambda _p: True)
    got = {alloc.allocate(f"s{i}") for i in range(3)}
    assert got == {30000, 30001, 30002}
    with pytest.raises(NoPortAvailable) as info:
        alloc.allocate("one-too-many")
    assert isinstance(info.value, SpawnError)  # the router catches one type for 503
    alloc.release(30001)
    assert alloc.allocate("again") == 30001


def test_port_held_by_foreign_socket_is_skipped() -> None:
    alloc = PortAllocator()
    sid = next(f"foreign{i}" for i in range(10_000) if port_is_bindable(derive_port(f"foreign{i}")))
    port = derive_port(sid)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert not port_is_bindable(port)
        got = alloc.allocate(sid)
    assert got != port
    assert PORT_MIN <= got < PORT_MIN + PORT_SPAN
    alloc.release(got)


async def test_1000_concurrent_allocations_distinct() -> None:
    alloc = PortAllocator()
    ids = [f"conc-{i}" for i in range(1000)]

    async def one(sid: str) -> int:
        return await asyncio.to_thread(alloc.allocate, sid)

    ports = await asyncio.gather(*(one(sid) for sid in ids))
    assert len(set(ports)) == 1000
    assert all(PORT_MIN <= p < PORT_MIN + PORT_SPAN for p in ports)
    for p in ports:
        alloc.release(p)
    assert alloc.held() == {}


def test_1000_allocations_from_threads_distinct_even_with_equal_ids() -> None:
    alloc = PortAllocator(is_free=lambda _p: True)
    ids = [f"same-{i % 10}" for i in range(1000)]  # many ids share a derived port
    with ThreadPoolExecutor(max_workers=32) as pool:
        ports = list(pool.map(alloc.allocate, ids))
    assert len(set(ports)) == 1000


def test_a_spare_port_is_never_one_a_worker_could_be_given() -> None:
    # Linux's ephemeral ports overlap the workers' range: 100 picks would land there ~40 times.
    picked = [spare_port() for _ in range(100)]
    assert all(not PORT_MIN <= port < PORT_MIN + PORT_SPAN for port in picked)
    assert all(port_is_bindable(port) for port in picked[-5:])


def test_a_spare_port_is_never_one_an_outgoing_connection_could_take_meanwhile() -> None:
    # A port from the ephemeral range, free when picked, was taken as a connection's source port
    # before the test's router bound it (CI, two test processes busy).
    ephemeral = ports.ephemeral_ports()
    picked = [spare_port() for _ in range(100)]
    assert not any(port in ephemeral for port in picked) and len(set(picked)) > 50


def test_the_ephemeral_range_falls_back_to_linuxs_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", "/nonexistent/ip_local_port_range")
    assert ports.ephemeral_ports() == range(32768, 61000)
