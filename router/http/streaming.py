"""Writing answers and streams to the client: whole SSE events, keep-alives after silence, and
the end of a stream when the client goes or the router stops."""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Final

import anyio
import anyio.lowlevel
from starlette.types import Receive, Send

from router.errors import INTERNAL_ERROR, error_body
from router.protocol.sse import KEEPALIVE_COMMENT, EventSplitter, EventTooLarge, encode_event, lone_event_data
from router.types import H_SESSION_ID, JSON

if TYPE_CHECKING:
    from router.http.exchange import Exchange
    from router.sessions.table import Session

NO_ANSWER: Final = "The worker's answer stream ended without an answer to this request"


async def send_start(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def send_accepted(send: Send, session: Session) -> None:
    await send_start(send, 202, [(H_SESSION_ID.encode(), session.id.encode())])
    await send({"type": "http.response.body", "body": b""})


async def send_json(send: Send, body: bytes, session: Session, *, status: int) -> None:
    headers = [(b"content-type", JSON.encode()), (H_SESSION_ID.encode(), session.id.encode())]
    await send_start(send, status, headers)
    await send({"type": "http.response.body", "body": body})


class Writer:
    """Writes body chunks and remembers when, so keep-alives go out only after silence."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.last = time.monotonic()

    async def __call__(self, data: bytes) -> None:
        self.last = time.monotonic()
        await self.send({"type": "http.response.body", "body": data, "more_body": True})


async def forward_events(
    chunks: AsyncIterable[bytes], write: Callable[[bytes], Awaitable[None]], exchange: Exchange | None
) -> None:
    """A worker's SSE stream, cut at event boundaries (so keep-alives never land mid-event),
    each chunk's whole events in one write; a request's own answer passes through its exchange."""
    splitter = EventSplitter()
    async for chunk in chunks:
        too_large: EventTooLarge | None = None
        try:
            events = splitter.feed(chunk)
        except EventTooLarge as exc:
            events, too_large = exc.events, exc
        if events:
            if exchange is not None:
                events = [await exchange.answer_event(e) for e in events]
            await write(b"".join(events))
        if too_large is not None:
            # Most likely the answer itself: this call gets a clear error, nothing else is held up.
            message = f"The worker's answer was too large to relay: {too_large}"
            if exchange is not None and not exchange.done:
                await exchange.failed(message)
                await write(encode_event(error_body(INTERNAL_ERROR, message, None, exchange.message.id)))
            return


async def answer_missing(exchange: Exchange) -> bytes:
    """An error event for a request whose answer stream ended without its answer (b"" when it
    had one): the client is not left waiting for it, and the record says what happened."""
    if exchange.done:
        return b""
    await exchange.failed(NO_ANSWER)
    return encode_event(error_body(INTERNAL_ERROR, NO_ANSWER, None, exchange.message.id))


async def whole_answer(data: bytes, exchange: Exchange) -> bytes:
    """An SSE answer that arrived complete, its events passed through the exchange, in one piece."""
    payload = lone_event_data(data)
    if payload is not None and not exchange.done:
        # The usual answer, one plain event: read as it is, not through the splitter.
        answer = await exchange.answer_json(payload)
        return (data if answer is payload else encode_event(answer)) + await answer_missing(exchange)
    out: list[bytes] = []

    async def collect(events: bytes) -> None:
        out.append(events)

    async def once() -> AsyncIterator[bytes]:
        yield data

    await forward_events(once(), collect, exchange)
    out.append(await answer_missing(exchange))
    return b"".join(out)


async def run_stream(
    receive: Receive, writer: Writer, work: Awaitable[None], *, keepalive: float, stop: anyio.Event | None = None
) -> None:
    """Runs ``work`` (which writes whole events) until it ends, the client goes or ``stop`` is
    set (a stream that never ends would hold up graceful shutdown). Meanwhile the task that
    watches for the client's disconnect also writes a keep-alive comment after ``keepalive``
    seconds of silence: load balancers cut idle streams after 60–125 s. The caller closes the
    upstream afterwards."""
    failure: list[Exception] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while True:
                silence = time.monotonic() - writer.last
                if silence >= keepalive:
                    await writer(KEEPALIVE_COMMENT)
                    continue
                with anyio.move_on_after(keepalive - silence):
                    if (await receive())["type"] == "http.disconnect":
                        tg.cancel_scope.cancel()
                        return

        async def until_stop(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        if stop is not None:
            tg.start_soon(until_stop, stop)
        try:
            await work
        except Exception as exc:  # re-raised outside the task group, so callers see it unwrapped
            failure.append(exc)
        tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
