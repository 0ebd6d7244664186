"""The client's roots as the router asks them (router/sessions/roots.py), and the GET stream a warm
worker's prepared session holds until a client takes it over (router/sessions/prepared_stream.py):
what it answers, and that a hand-over loses none of the worker's bytes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import pytest
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from router.sessions.control import ControlError, ControlSession
from router.sessions.prepared_stream import PreparedStream, hand_over
from router.sessions.roots import ROOTS_METHOD, ClientRoots
from router.sessions.table import Session
from tests.support import async_wait_for

ROOTS = [{"uri": "file:///tmp/project", "name": "project"}]
CC_PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": True}}, "clientInfo": {}}


def event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


# -- ClientRoots -------------------------------------------------------------------------------------


def test_the_answer_to_our_question_is_ours_and_a_workers_is_not() -> None:
    roots = ClientRoots()
    question = roots.question()
    assert question is not None and question["method"] == ROOTS_METHOD
    assert roots.question() is None, "asked twice while the first is in flight"
    assert not roots.take_answer(0, {"result": {"roots": []}}), "a worker's id (an integer) is the worker's"
    assert roots.take_answer(question["id"], {"result": {"roots": ROOTS}})
    assert roots.known == ROOTS
    assert roots.question() is None, "known: nothing to ask"


async def test_answered_waits_for_the_client_and_an_error_leaves_them_unknown() -> None:
    roots = ClientRoots()
    question = roots.question()
    assert question is not None
    with anyio.move_on_after(0.05) as waited:
        await roots.answered()
    assert waited.cancelled_caught, "returned before the client answered"
    roots.take_answer(question["id"], {"error": {"code": -32601, "message": "no"}})
    with anyio.fail_after(1):
        assert await roots.answered() is None


def test_a_change_forgets_them_and_a_stale_answer_is_dropped() -> None:
    roots = ClientRoots()
    first = roots.question()
    assert first is not None
    roots.changed()  # notifications/roots/list_changed while our question was in flight
    second = roots.question()
    assert second is not None and second["id"] != first["id"]
    assert roots.take_answer(first["id"], {"result": {"roots": [{"uri": "file:///old"}]}}), "ours, so not forwarded"
    assert roots.known is None, "the answer from before the change was taken for the roots"
    roots.take_answer(second["id"], {"result": {"roots": ROOTS}})
    assert roots.known == ROOTS
    roots.changed()
    assert roots.known is None and roots.question() is not None


def test_roots_from_a_previous_run_are_known_and_asked_again() -> None:
    """Restored from session.json: a worker asking now gets them, and the client's stream, once
    back, is asked again; the same answer is no news, another is."""
    roots = ClientRoots()
    news: list[object] = []
    roots.on_new(lambda: news.append(roots.last))
    roots.restore(ROOTS)
    assert roots.known_or_empty() == ROOTS
    question = roots.question()
    assert question is not None, "not asked again after a restart"
    roots.take_answer(question["id"], {"result": {"roots": ROOTS}})
    assert news == []
    roots.changed()
    assert roots.last == ROOTS, "the last roots forgotten before the client gave others"
    question = roots.question()
    assert question is not None
    roots.take_answer(question["id"], {"result": {"roots": [{"uri": "file:///elsewhere"}]}})
    assert news == [[{"uri": "file:///elsewhere"}]]


def test_a_session_taken_up_again_never_asks_under_an_id_it_used_before() -> None:
    first, again = ClientRoots(), ClientRoots()  # one session, before and after a restart
    again.restore([{"uri": "file:///p"}])
    asked = [first.question(), again.question()]
    assert all(q is not None for q in asked)
    ids = [q["id"] for q in asked if q is not None]
    assert ids[0] != ids[1]
    assert again.take_answer(ids[1], {"result": {"roots": [{"uri": "file:///q"}]}})
    assert again.known == [{"uri": "file:///q"}]


def test_an_answer_that_is_no_roots_leaves_them_unknown() -> None:
    roots = ClientRoots()
    for bad in ([{"name": "no uri"}], [{"uri": 7}], ["file:///p"], {"uri": "file:///p"}):
        roots.changed()
        question = roots.question()
        assert question is not None
        roots.take_answer(question["id"], {"result": {"roots": bad}})
        assert roots.known is None and roots.last is None, bad


def test_a_worker_session_opened_before_a_change_is_behind_until_the_next_one() -> None:
    roots = ClientRoots()
    roots.worker_opened()
    assert not roots.worker_behind
    roots.changed()
    assert roots.worker_behind, "a change left the worker's session as it was"
    roots.changed()
    roots.worker_opened()
    assert not roots.worker_behind


def test_a_stream_that_ends_before_the_answer_asks_again_on_the_next() -> None:
    roots = ClientRoots()
    assert roots.question() is not None
    roots.stream_lost()
    assert roots.question() is not None


async def test_a_session_asks_only_a_client_that_declared_roots_and_holds_its_stream() -> None:
    declared, plain = Session("a", initialize_params=CC_PARAMS), Session("b", initialize_params={"capabilities": {}})
    declared.ask_roots()
    assert declared.outbox.take() == [], "asked with no stream to carry the question"
    for session in (declared, plain):
        await session.stream.claim(anyio.CancelScope())
        session.ask_roots()
    [question] = declared.outbox.take()
    assert question["method"] == ROOTS_METHOD
    assert plain.outbox.take() == []


# -- PreparedStream ----------------------------------------------------------------------------------


class FakeUpstream:
    """A worker's GET stream: chunks as the test sends them; a read waits without taking any."""

    def __init__(self, chunks: MemoryObjectReceiveStream[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        async for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


class FakeSession:
    def __init__(self, upstream: FakeUpstream) -> None:
        self.upstream = upstream
        self.answers: list[dict[str, Any]] = []
        self.refuse = False

    async def open_stream(self) -> FakeUpstream:
        return self.upstream

    async def answer(self, message: dict[str, Any]) -> None:
        if self.refuse:
            raise ControlError("worker answered 404")
        self.answers.append(message)


@pytest.fixture
def wire() -> Iterator[tuple[MemoryObjectSendStream[bytes], FakeSession]]:
    send, receive = anyio.create_memory_object_stream[bytes](16)
    with send, receive:
        yield send, FakeSession(FakeUpstream(receive))


@asynccontextmanager
async def holding(fake: FakeSession) -> AsyncIterator[tuple[PreparedStream, TaskGroup]]:
    """The prepared stream opened on ``fake`` and reading in a task of the group yielded."""
    stream = PreparedStream(cast(ControlSession, fake), ROOTS)
    await stream.open()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.run)
        yield stream, tg


async def test_it_answers_roots_with_the_roots_it_was_given_and_pings(
    wire: tuple[MemoryObjectSendStream[bytes], FakeSession],
) -> None:
    send, fake = wire
    async with holding(fake) as (stream, _tg):
        await send.send(event({"jsonrpc": "2.0", "id": 0, "method": ROOTS_METHOD}))
        await send.send(event({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
        await send.send(event({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        await send.send(event({"jsonrpc": "2.0", "id": 2, "method": "elicitation/create"}))
        await async_wait_for(lambda: len(fake.answers) == 3)
        await stream.close()
    assert fake.answers[0] == {"jsonrpc": "2.0", "id": 0, "result": {"roots": ROOTS}}
    assert fake.answers[1] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert fake.answers[2]["error"]["code"] == -32601
    assert fake.upstream.closed


async def test_a_hand_over_keeps_what_it_had_not_handled_and_what_comes_after(
    wire: tuple[MemoryObjectSendStream[bytes], FakeSession],
) -> None:
    send, fake = wire
    ping = event({"jsonrpc": "2.0", "id": 7, "method": "ping"})
    async with holding(fake) as (stream, _tg):
        await send.send(event({"jsonrpc": "2.0", "id": 6, "method": "ping"}) + ping[:10])  # half an event
        await async_wait_for(lambda: len(fake.answers) == 1)
        adopted = await stream.take()
    assert adopted is not None and cast(Any, adopted.upstream) is fake.upstream and not fake.upstream.closed
    await send.send(ping[10:])
    send.close()
    relayed = adopted.rest + b"".join([chunk async for chunk in adopted.upstream.aiter_raw()])
    assert relayed == ping, "the client's stream would not see the ping the worker sent during the hand-over"
    assert len(fake.answers) == 1, "the holder answered after it handed the stream over"


async def test_a_stream_the_worker_ended_is_not_handed_over(
    wire: tuple[MemoryObjectSendStream[bytes], FakeSession],
) -> None:
    send, fake = wire
    async with holding(fake) as (stream, _tg):
        send.close()  # the worker closed the session's GET stream (it ended the session)
        await async_wait_for(lambda: not stream.alive)
    assert await stream.take() is None
    assert fake.upstream.closed


async def test_a_refused_answer_does_not_stop_the_holder(
    wire: tuple[MemoryObjectSendStream[bytes], FakeSession],
) -> None:
    send, fake = wire
    fake.refuse = True
    async with holding(fake) as (stream, _tg):
        await send.send(event({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        await anyio.sleep(0.05)
        fake.refuse = False
        await send.send(event({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        await async_wait_for(lambda: len(fake.answers) == 1)
        assert stream.alive
        await stream.close()


async def test_a_hand_over_during_an_answer_waits_for_it(
    wire: tuple[MemoryObjectSendStream[bytes], FakeSession],
) -> None:
    """The client's first call arrives while the warm-up's roots/list answer is on its way: the
    answer still reaches the worker (its call would wait for it), then the stream is handed over."""
    send, fake = wire
    release = anyio.Event()
    answering = anyio.Event()
    record = fake.answer

    async def slow_answer(message: dict[str, Any]) -> None:
        answering.set()
        await release.wait()
        await record(message)

    fake.answer = slow_answer  # type: ignore[method-assign]
    async with holding(fake) as (stream, tg):
        await send.send(event({"jsonrpc": "2.0", "id": 0, "method": ROOTS_METHOD}))
        await answering.wait()
        handed: list[Any] = []

        async def hand_over() -> None:
            handed.append(await stream.take())

        tg.start_soon(hand_over)
        await anyio.sleep(0.05)
        assert not handed, "handed over with the worker's question unanswered"
        release.set()
    assert fake.answers == [{"jsonrpc": "2.0", "id": 0, "result": {"roots": ROOTS}}]
    assert handed and handed[0] is not None and handed[0].upstream is fake.upstream


async def test_a_stream_waiting_for_the_clients_relay_goes_only_to_its_own_worker() -> None:
    """Handed over while the client's GET stream was away: the next relay of that worker takes it;
    a relay of another worker (one that started before the session changed worker) neither takes
    it nor drops it unclosed (the worker would ping into a stream nobody reads, and refuse the
    relay's own GET: one stream per session); the worker's leaving drops it, to be closed."""
    session = Session("s", initialize_params=CC_PARAMS)
    ours: Any = object()
    other: Any = object()
    adopted: Any = object()
    session.adopted_stream = (ours, adopted)
    assert session.take_adopted_stream(ours) is adopted
    assert session.take_adopted_stream(ours) is None, "handed out twice"
    second: Any = object()
    session.adopted_stream = (ours, second)
    assert session.take_adopted_stream(other) is None
    assert session.adopted_stream == (ours, second), "another worker's relay dropped it"
    assert session.drop_adopted_stream() is second
    assert session.adopted_stream is None


async def test_a_client_without_a_get_stream_is_not_kept_waiting() -> None:
    """No stream to carry the router's question: the hand-over is refused at once, not after
    the roots wait (the stream gets ``STREAM_GRACE`` to open, in Continuity.attach)."""

    stream = PreparedStream(cast(ControlSession, object()), ROOTS)
    session = Session("client", initialize_params=CC_PARAMS)
    with anyio.fail_after(1.0):
        assert not await stream.hand_over_to(session, wait=30.0)


async def test_handed_over_it_answers_on_until_the_clients_stream_takes_it(
    wire: tuple[MemoryObjectSendStream[bytes], FakeSession],
) -> None:
    """A resume's restore runs between the hand-over and the relay: a ping the worker sends then
    is answered by the holder, one sent after the relay took the stream is the client's."""
    send, fake = wire
    session = Session("client", initialize_params=CC_PARAMS)
    await session.stream.claim(anyio.CancelScope())
    question = session.roots.question()
    assert question is not None
    session.roots.take_answer(question["id"], {"result": {"roots": ROOTS}})
    after = event({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    async with holding(fake) as (stream, _tg):
        assert await stream.hand_over_to(session, wait=1.0)
        await send.send(event({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        await async_wait_for(lambda: len(fake.answers) == 1)
        adopted = await stream.take()
        await send.send(after)
        send.close()
    assert fake.answers == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
    assert adopted is not None
    relayed = adopted.rest + b"".join([chunk async for chunk in adopted.upstream.aiter_raw()])
    assert relayed == after


class Prepared:
    """A warm worker's prepared session opened in the client's shape."""

    def __init__(self, opened_with: dict[str, Any]) -> None:
        self.opened_with = opened_with
        self.session_id = "prepared"

    async def close(self) -> None:
        pass


async def test_a_resume_leaves_the_wait_for_a_stream_not_open_yet_to_what_follows() -> None:
    """On a resume the hand-over does not wait for the client's GET stream (after a pause it is
    open or not). When it is not, nothing was waited for: the stream held for the client next
    (hold_for_streamless) must still give it ``STREAM_GRACE``, or the worker's roots/list is
    answered with no roots just before the client's stream, reopening, would have taken it."""
    session = Session("client", initialize_params=CC_PARAMS)
    stream = PreparedStream(cast(ControlSession, object()), ROOTS)
    with anyio.fail_after(1.0):
        taken = await hand_over(
            session, cast(ControlSession, Prepared(CC_PARAMS)), stream, wait=1.0, resuming=True,
            start_soon=lambda job: None,
        )  # fmt: skip
    assert taken.prepared is None and taken.held is None
    assert not taken.waited, "said to have waited for the client's stream, which it did not"
