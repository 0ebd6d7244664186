"""A prepared session's GET stream handed over on a real @playwright/mcp worker: between the
hand-over and the client's relay taking it (a resume's restore runs in between, seconds on a
loaded machine), the worker's pings must still be answered, or the worker closes the session
5 s after the first unanswered one (router/sessions/prepared_stream.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final, cast

import anyio

from router.protocol.sse import EventSplitter, event_json
from router.sessions.control import ControlSession
from router.sessions.prepared_stream import PreparedStream
from router.sessions.table import Session
from router.upstream.connection import WorkerConnection
from tests.e2e.claude_code import DirectWorker
from workers.supervisor import Worker

ROOTS: Final = [{"uri": "file:///tmp/project", "name": "project"}]
PARAMS: Final = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"roots": {"listChanged": True}},
    "clientInfo": {"name": "claude-code", "version": "2.1.328"},
}
# Past the worker's wait for a ping's answer (5 s) plus its ping interval (3 s).
PAST_A_PING_TIMEOUT: Final = 9.0
NEXT_PING_WITHIN: Final = 10.0
CALL_LIMIT: Final = 60.0


class _Endpoint:
    """What WorkerConnection reads of a Worker, for a worker the test runs itself."""

    def __init__(self, direct: DirectWorker) -> None:
        self.url = direct.url
        self.port = direct.port
        self.host_header = f"localhost:{direct.port}"


async def a_client_holding_its_stream(roots: list[dict[str, Any]]) -> Session:
    """A session whose client's GET stream is open and whose roots the router knows."""
    session = Session("client", initialize_params=dict(PARAMS))
    await session.stream.claim(anyio.CancelScope())
    question = session.roots.question()
    assert question is not None
    session.roots.take_answer(question["id"], {"result": {"roots": roots}})
    return session


async def relayed_ping(rest: bytes, chunks: AsyncIterator[bytes]) -> dict[str, Any]:
    """The first ping the adopted stream carries."""
    splitter = EventSplitter()
    pending = [rest] if rest else []
    while True:
        chunk = pending.pop() if pending else await anext(chunks)
        for event in splitter.feed(chunk):
            message = event_json(event)
            if isinstance(message, dict) and message.get("method") == "ping":
                return message


async def test_the_worker_is_answered_until_the_clients_stream_takes_the_stream(
    tmp_path: Path, chromium: str
) -> None:
    with DirectWorker(tmp_path, chromium) as direct:
        connection = WorkerConnection(cast(Worker, _Endpoint(direct)))
        try:
            prepared = ControlSession(connection)
            await prepared.open(dict(PARAMS))
            stream = PreparedStream(prepared, ROOTS)
            await stream.open()
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream.run)
                with anyio.fail_after(CALL_LIMIT):
                    await prepared.call("browser_tabs", {"action": "list"})  # roots asked and answered; pings start
                assert await stream.hand_over_to(await a_client_holding_its_stream(ROOTS), wait=1.0)
                # The resume's restore, or a client's GET stream away for a moment: nobody relays yet.
                await anyio.sleep(PAST_A_PING_TIMEOUT)
                adopted = await stream.take()
                assert adopted is not None, "the worker ended the stream: a ping went unanswered"
                chunks = adopted.upstream.aiter_raw()
                with anyio.fail_after(NEXT_PING_WITHIN):
                    ping = await relayed_ping(adopted.rest, chunks)
                await prepared.answer({"jsonrpc": "2.0", "id": ping["id"], "result": {}})  # as the client would
                with anyio.fail_after(CALL_LIMIT):
                    text = await prepared.call("browser_tabs", {"action": "list"})  # the session lives on
                assert "about:blank" in text
                await adopted.upstream.aclose()
                tg.cancel_scope.cancel()
            await prepared.close()
        finally:
            await connection.aclose()

