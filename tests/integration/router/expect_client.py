"""A POST sent the way curl and .NET send a body: ``Expect: 100-continue`` first, the body only
after the server's ``100 Continue``. httpx cannot (it reads an interim head as a bad status line),
so this speaks HTTP/1.1 with h11 over a plain socket and hands back the final answer."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import h11

from tests.support.auth import auth_headers
from tests.support.client import ACCEPT_BOTH
from tests.support.sse import sse_messages

SOCKET_TIMEOUT: Final = 20.0


@dataclass
class Answer:
    interim: list[int]  # the statuses of the 1xx heads before the answer
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def messages(self) -> list[dict[str, Any]]:
        content_type = self.headers.get("content-type", "")
        if content_type.startswith("application/json"):
            return [json.loads(self.body)]
        return sse_messages(self.body.decode())


def post_expecting_continue(url: str, session_id: str, message: dict[str, Any]) -> Answer:
    """One POST of ``message`` with ``Expect: 100-continue``: the body waits for the server's 100."""
    parts = urlsplit(url)
    body = json.dumps(message).encode()
    headers = {
        "host": parts.netloc, "content-type": "application/json", "accept": ACCEPT_BOTH,
        "mcp-session-id": session_id, "expect": "100-continue", "content-length": str(len(body)),
        **auth_headers(),
    }  # fmt: skip
    connection = h11.Connection(h11.CLIENT)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), SOCKET_TIMEOUT) as sock:
        sock.settimeout(SOCKET_TIMEOUT)
        request = h11.Request(method="POST", target=parts.path or "/", headers=list(headers.items()))
        sock.sendall(connection.send(request))
        interim: list[int] = []
        answer: Answer | None = None
        chunks: list[bytes] = []
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = sock.recv(65536)
                connection.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse):
                interim.append(event.status_code)
                if event.status_code == 100 and len(interim) == 1:
                    sock.sendall(connection.send(h11.Data(data=body)) + connection.send(h11.EndOfMessage()))
            elif isinstance(event, h11.Response):
                answer = Answer(interim, event.status_code, {k.decode(): v.decode() for k, v in event.headers}, b"")
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                assert answer is not None
                answer.body = b"".join(chunks)
                return answer
            elif isinstance(event, h11.ConnectionClosed):
                raise AssertionError(f"connection closed before the answer ended (interim heads {interim})")
