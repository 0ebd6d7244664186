"""``Expect: 100-continue`` (curl's habit for a body past 1 KiB, .NET's by default): the router's
own server answers the interim ``100 Continue``; the worker must never be asked for one, and an
interim head a worker sends anyway is not its answer. Once a worker's ``100`` was taken for the
answer, the real one arrived on an idle socket, the socket went into the pool twice, and two
calls of the session at once then shared it and hung."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

from router.upstream.pool import UpstreamPool
from tests.integration.router.expect_client import post_expecting_continue
from tests.support import RawClient, RouterThread, wait_recorded
from tests.support.client import ref_of, text_of

CALL_TIMEOUT: Final = 20.0
ANSWER: Final = b'{"ok":true}'


def tools_call(id: int, text: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}


def test_an_expect_continue_call_is_answered_recorded_and_leaves_the_session_usable(rec_router: RouterThread) -> None:
    with RawClient(rec_router.url) as client, RawClient(rec_router.url) as other:
        client.initialize()
        client.start_worker()
        assert client.session_id is not None
        answer = post_expecting_continue(rec_router.url, client.session_id, tools_call(7, "x" * 2000))
        assert answer.interim == [100]  # the router's own, once
        assert answer.status == 200
        [message] = [m for m in answer.messages if m.get("id") == 7]
        assert text_of(message) == "x" * 2000
        # Two calls at once on the session: each needs a socket of its own to the worker.
        other.session_id = client.session_id
        with ThreadPoolExecutor(2) as pool:
            texts = [pool.submit(c.text, "echo", text=t) for c, t in ((client, "one"), (other, "two"))]
            assert [t.result(timeout=CALL_TIMEOUT) for t in texts] == ["one", "two"]
        client.delete()
    wait_recorded(rec_router)
    with sqlite3.connect(Path(rec_router.settings.state_dir) / "router.db") as db:
        row = db.execute("SELECT status, duration_ms FROM responses WHERE ref_id = ?", (ref_of(message),)).fetchone()
    assert row is not None and row[0] == "success" and row[1] is not None


@asynccontextmanager
async def continuing_worker() -> AsyncIterator[tuple[int, list[int]]]:
    """A worker that writes ``100 Continue`` before each answer (as a worker asked with Expect
    does); its port and, per connection it accepted, the number of requests it read."""
    served: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(0)
        at = len(served) - 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.lower().split(b"\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length"))
                await reader.readexactly(length)
                served[at] += 1
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(ANSWER), ANSWER)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], served


async def test_the_upstream_client_reads_past_an_interim_head() -> None:
    async with continuing_worker() as (port, served):
        pool = UpstreamPool("127.0.0.1", port, "/mcp")
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                first = await pool.request("POST", [(b"host", b"w")], b"{}")
                assert first.status_code == 200
                assert first.header(b"content-type") == b"application/json"
                assert await first.aread() == ANSWER
                # Two at once: the socket the first used is idle once, so the second needs its own.
                answers = await asyncio.gather(*(pool.request("POST", [(b"host", b"w")], b"{}") for _ in range(2)))
                assert [a.status_code for a in answers] == [200, 200]
                assert [await a.aread() for a in answers] == [ANSWER, ANSWER]
                assert pool.busy == 0
                assert sorted(served) == [1, 2]  # the first socket kept alive and reused, one more opened
        finally:
            await pool.aclose()
