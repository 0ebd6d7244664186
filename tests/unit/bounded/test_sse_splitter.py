"""EventSplitter: linear in its input, and an event past the maximum is refused, not buffered."""

from __future__ import annotations

import pytest

from router.protocol.sse import MAX_EVENT_BYTES, EventSplitter, EventTooLarge

CHUNK = 4096


def test_a_big_event_fed_in_small_chunks_is_scanned_about_once() -> None:
    payload = b"data: " + b"x" * (8 * 1024 * 1024) + b"\n\n"
    splitter = EventSplitter()
    events: list[bytes] = []
    for at in range(0, len(payload), CHUNK):
        events += splitter.feed(payload[at : at + CHUNK])
    assert events == [payload]
    # Three separators, each scanning every byte about once (plus a few bytes per chunk of overlap).
    assert splitter.bytes_scanned <= 3 * len(payload) + 16 * (len(payload) // CHUNK)


def test_many_small_events_in_one_chunk_are_scanned_about_once() -> None:
    event = b"event: message\ndata: {}\n\n"
    stream = event * 100_000
    splitter = EventSplitter()
    assert splitter.feed(stream) == [event] * 100_000
    assert splitter.bytes_scanned <= 3 * len(stream) + 16


def test_boundaries_split_across_chunks_are_found() -> None:
    stream = b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\n\n"
    for size in (1, 2, 3, 5):
        splitter = EventSplitter()
        events: list[bytes] = []
        for at in range(0, len(stream), size):
            events += splitter.feed(stream[at : at + size])
        assert events == [b"data: a\r\n\r\n", b"data: b\n\n", b"data: c\r\r", b"data: d\n\n"], size


def test_the_default_maximum_is_16_mib() -> None:
    assert EventSplitter().max_event_bytes == MAX_EVENT_BYTES == 16 * 1024 * 1024


def test_an_event_growing_past_the_maximum_is_refused_and_skipped() -> None:
    splitter = EventSplitter(max_event_bytes=1000)
    assert splitter.feed(b"data: ok\n\ndata: ") == [b"data: ok\n\n"]
    with pytest.raises(EventTooLarge) as refused:
        for _ in range(10):
            splitter.feed(b"y" * 300)
    assert refused.value.limit == 1000 and refused.value.size > 1000
    # The rest of the refused event is dropped, whatever its length; the stream then goes on.
    assert splitter.feed(b"y" * 5000) == []
    assert splitter.feed(b"yy\n\ndata: next\n\n") == [b"data: next\n\n"]
    assert splitter.rest() == b""


def test_a_whole_oversized_event_in_one_chunk_keeps_its_neighbours() -> None:
    splitter = EventSplitter(max_event_bytes=100)
    big = b"data: " + b"z" * 200 + b"\n\n"
    with pytest.raises(EventTooLarge) as refused:
        splitter.feed(b"data: before\n\n" + big + b"data: after\n\n")
    assert refused.value.events == [b"data: before\n\n"]
    assert refused.value.size == len(big)
    assert splitter.feed(b"") == [b"data: after\n\n"]


def _naive_split(stream: bytes) -> tuple[list[bytes], bytes]:
    """The earliest-ending boundary, searched from scratch: what the splitter must agree with."""
    events: list[bytes] = []
    while True:
        ends = [at + len(sep) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if (at := stream.find(sep)) >= 0]
        if not ends:
            return events, stream
        events.append(stream[: min(ends)])
        stream = stream[min(ends) :]


def test_agrees_with_a_naive_split_on_random_streams() -> None:
    import random

    rng = random.Random(7)
    for _ in range(300):
        stream = bytes(rng.choice(b"ab\r\n") for _ in range(rng.randrange(1, 200)))
        splitter = EventSplitter()
        events: list[bytes] = []
        at = 0
        while at < len(stream):
            step = rng.randrange(1, 9)
            events += splitter.feed(stream[at : at + step])
            at += step
        assert (events, splitter.rest()) == _naive_split(stream)
