"""The direct lane (router/http/direct.py, server.py): POSTs to /mcp served by the server's protocol
without uvicorn's request cycle. Each test runs against a router with the lane as ``serve`` runs it
(its tool calls answered by the steady lane, router/http/steady.py), one with the lane alone
(``--no-steady-lane``) and one without either (``--no-direct-lane``), and all must answer alike:
what a client sees on the wire (keep-alive, pipelining, ``Connection: close``, chunked bodies,
bodies past the cap, a client that goes) is the HTTP server's business, and the lanes must not
change it."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any, Final

import httpx
import pytest

from router.http.server import LANE_MAX_BODY
from tests.support import RawClient, RouterThread, raw_post, router_settings
from tests.support.auth import TEST_TOKEN
from tests.support.wait import wait_for
from workers.orphans import processes_for

MAX_BODY: Final = 256 * 1024  # past the lane's own cap (LANE_MAX_BODY): such bodies are uvicorn's
SOCKET_TIMEOUT: Final = 20.0
GONE_TIMEOUT: Final = 20.0


# The lane as `serve` runs it (its tool calls answered by the steady lane), the lane alone, uvicorn.
LANES: Final = {"lane": (True, True), "lane-no-steady": (True, False), "uvicorn": (False, False)}


@pytest.fixture(scope="module", params=list(LANES))
def router(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp(request.param)
    direct, steady = LANES[request.param]
    settings = router_settings(state, direct_lane=direct, steady_lane=steady, max_body_bytes=MAX_BODY)
    with RouterThread(settings) as served:
        yield served
    wait_for(lambda: not processes_for(state), timeout=GONE_TIMEOUT)


@pytest.fixture
def session(router: RouterThread) -> Iterator[RawClient]:
    with RawClient(router.url) as client:
        client.initialize()
        client.start_worker()
        yield client


def lane_on(router: RouterThread) -> bool:
    return bool(router.settings.direct_lane)


def call_body(id: int, tool: str = "echo", **arguments: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    ).encode()


def read_responses(sock: socket.socket, count: int) -> list[httpx.Response]:
    """``count`` HTTP/1.1 responses read off a raw socket, in order (framed by length or chunks)."""
    buffer = b""
    responses: list[httpx.Response] = []

    def more() -> None:
        nonlocal buffer
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed after {len(responses)} responses: {buffer[:200]!r}")
        buffer += chunk

    while len(responses) < count:
        while b"\r\n\r\n" not in buffer:
            more()
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in header_lines]
        names = {name.lower(): value for name, value in headers}
        if "content-length" in names:
            size = int(names["content-length"])
            while len(buffer) < size:
                more()
            body, buffer = buffer[:size], buffer[size:]
        else:
            assert names.get("transfer-encoding") == "chunked", head
            body = b""
            while True:
                while b"\r\n" not in buffer:
                    more()
                size_line, rest = buffer.split(b"\r\n", 1)
                size = int(size_line, 16)
                while len(rest) < size + 2:
                    more()
                    size_line, rest = buffer.split(b"\r\n", 1)
                body += rest[:size]
                buffer = rest[size + 2:]
                if size == 0:
                    break
        responses.append(httpx.Response(int(status_line.split()[1]), headers=headers, content=body))
    return responses


def answer_of(response: httpx.Response, id: int) -> dict[str, Any]:
    text = response.content.decode()
    payloads = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")] or [text]
    [answer] = [m for m in map(json.loads, payloads) if m.get("id") == id]
    return answer


def connect(router: RouterThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", router.port), timeout=SOCKET_TIMEOUT)
    return sock


def test_the_lane_serves_tool_calls_and_frames_a_whole_answer_by_its_length(
    router: RouterThread, session: RawClient
) -> None:
    response = session.post(json.loads(call_body(1, text="hello")))
    assert response.status_code == 200
    assert answer_of(response, 1)["result"]["content"][0]["text"] == "hello"
    assert response.headers["mcp-session-id"] == session.session_id
    assert response.headers["content-type"].startswith("text/event-stream")
    lane = router.app.state.direct_lane
    if lane_on(router):
        served = lane.served
        pong = session.post({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert pong.json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        assert lane.served == served + 1  # through the lane, not uvicorn's cycle
        session.http.get(f"{router.base_url}/healthz")
        assert lane.served == served + 1  # other paths are uvicorn's
    else:
        assert lane is None


def test_pipelined_requests_are_answered_one_after_another_in_order(router: RouterThread, session: RawClient) -> None:
    health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with connect(router) as sock:
        # A slow call first: were the second answered at once, the answers would interleave.
        sock.sendall(raw_post(session, call_body(11, "slow", seconds=0.3)) + raw_post(session, call_body(12, text="b"))
                     + health + raw_post(session, call_body(13, text="c")))
        first, second, third, fourth = read_responses(sock, 4)
    assert answer_of(first, 11)["result"]["content"][0]["text"]
    assert answer_of(second, 12)["result"]["content"][0]["text"] == "b"
    assert third.status_code == 200 and third.json()["status"] == "ok"
    assert answer_of(fourth, 13)["result"]["content"][0]["text"] == "c"


def test_connection_close_is_honoured_after_the_answer(router: RouterThread, session: RawClient) -> None:
    with connect(router) as sock:
        sock.sendall(raw_post(session, call_body(21, text="bye"), "Connection: close"))
        [response] = read_responses(sock, 1)
        assert sock.recv(1) == b""  # closed by the router once the answer was out
    assert response.headers.get("connection") == "close"
    assert answer_of(response, 21)["result"]["content"][0]["text"] == "bye"


def test_a_chunked_request_body_is_read_whole(router: RouterThread, session: RawClient) -> None:
    with connect(router) as sock:
        sock.sendall(raw_post(session, call_body(31, text="in two chunks"), chunked=True))
        [response] = read_responses(sock, 1)
    assert answer_of(response, 31)["result"]["content"][0]["text"] == "in two chunks"


def test_a_body_past_the_cap_is_refused_and_the_connection_serves_on(router: RouterThread, session: RawClient) -> None:
    too_big = call_body(41, text="x" * MAX_BODY)
    with connect(router) as sock:
        sock.sendall(raw_post(session, too_big))
        [refused] = read_responses(sock, 1)
        assert refused.status_code == 413
        assert refused.json()["error"]["message"].startswith("Payload Too Large")
    # Chunked, its size is not known from its head: refused once past the cap all the same.
    with connect(router) as sock:
        sock.sendall(raw_post(session, too_big, chunked=True))
        [refused] = read_responses(sock, 1)
        assert refused.status_code == 413
    assert session.text("echo", text="after") == "after"


def test_a_large_body_goes_through_uvicorns_cycle_and_is_answered(router: RouterThread, session: RawClient) -> None:
    big = "y" * (LANE_MAX_BODY + 1)
    lane = router.app.state.direct_lane
    served = lane.served if lane is not None else 0
    assert session.text("echo", text=big) == big
    assert (lane.served if lane is not None else 0) == served  # not gathered by the lane


def test_a_body_declared_past_the_cap_is_refused_before_it_is_sent(router: RouterThread, session: RawClient) -> None:
    head = raw_post(session, b"").replace(b"Content-Length: 0", b"Content-Length: %d" % (MAX_BODY * 10))
    with connect(router) as sock:
        sock.sendall(head)  # and none of the body: the refusal must not wait for it
        [refused] = read_responses(sock, 1)
    assert refused.status_code == 413
    # Without the token: refused for that, also before the body.
    anonymous = head.replace(f"Authorization: Bearer {TEST_TOKEN}\r\n".encode(), b"")
    with connect(router) as sock:
        sock.sendall(anonymous)
        [refused] = read_responses(sock, 1)
    assert refused.status_code == 401


def test_a_client_that_goes_mid_call_leaves_the_session_and_the_router_serving(
    router: RouterThread, session: RawClient
) -> None:
    with connect(router) as sock:
        sock.sendall(raw_post(session, call_body(51, "slow", seconds=30)))
        live = router.manager.sessions.get(session.session_id)
        wait_for(lambda: 51 in live.requests, timeout=GONE_TIMEOUT)
    # The request ends with its client (cancelled towards the worker), not after its 30 s.
    wait_for(lambda: 51 not in live.requests, timeout=GONE_TIMEOUT)
    assert session.text("echo", text="still here") == "still here"


def test_an_http_1_0_post_is_answered_and_closed(router: RouterThread, session: RawClient) -> None:
    request = raw_post(session, call_body(61, text="old")).replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    with connect(router) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200")
    assert b'"old"' in body


def test_wrong_credentials_and_hostile_origins_are_refused_as_before(router: RouterThread, session: RawClient) -> None:
    wrong = session.post(json.loads(call_body(71, text="x")), authorization="Bearer nope")
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] < 0
    origin = session.post(json.loads(call_body(72, text="x")), origin="http://evil.example")
    assert origin.status_code == 403 and origin.json()["error"]["code"] < 0
    garbled = session.post(b"{not json")
    assert garbled.status_code == 400 and garbled.json()["error"]["code"] == -32700



def test_a_client_that_goes_with_a_request_queued_behind_its_call_ends_that_call(
    router: RouterThread, session: RawClient
) -> None:
    if not lane_on(router):
        pytest.skip("uvicorn's own cycle misses this disconnect: the queued request has become its cycle")
    with connect(router) as sock:
        sock.sendall(raw_post(session, call_body(81, "slow", seconds=30)) + raw_post(session, call_body(82, text="q")))
        live = router.manager.sessions.get(session.session_id)
        wait_for(lambda: 81 in live.requests, timeout=GONE_TIMEOUT)
    wait_for(lambda: 81 not in live.requests, timeout=GONE_TIMEOUT)
    assert session.text("echo", text="still here") == "still here"
