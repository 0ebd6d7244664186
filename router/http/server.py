"""The router's HTTP/1 server protocol: uvicorn's, with the head limits of ``limits.py``, and POSTs
to /mcp served by the direct lane (``direct.py``) instead of uvicorn's request cycle.

A request is taken by the lane when its head ends, if it is one the lane serves the same as
uvicorn would: a POST to exactly the lane's path, HTTP/1.1, no ``Expect`` and no upgrade, on a
connection with no answer under way, within the concurrency cap, with a body of at most
``LANE_MAX_BODY`` (a larger one declared goes to uvicorn, whose cycle runs the checks before
reading it). Its body is gathered here (a chunked one past the cap is handed to uvicorn with
what came of it), and the request starts once the body is whole. Anything else is uvicorn's.

While the lane answers, its request stands as the connection's cycle, so a request pipelined
behind it is queued by uvicorn and started when the answer is complete, as behind any other.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

from starlette.types import ASGIApp, Scope

from router.http.direct import DirectLane, DirectRequest
from router.http.limits import LimitedHttpToolsProtocol

__all__ = ["LANE_MAX_BODY", "RouterHttpProtocol", "router_protocol"]

# The most body the lane gathers before the request's checks run (a tool call's is a few hundred
# bytes; uvicorn pauses reading at the same size while its app has not read the body).
LANE_MAX_BODY: Final = 64 * 1024


class RouterHttpProtocol(LimitedHttpToolsProtocol):
    """The lane is a class attribute, set by ``router_protocol`` (uvicorn builds the protocol
    from its class alone)."""

    lane: DirectLane | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lane_body: bytearray | None = None  # a body being gathered for the lane
        self._keep_alive = True
        # The lane's request under way: told when the client goes, even once a request pipelined
        # behind it has become uvicorn's cycle.
        self._direct: DirectRequest | None = None

    # -- parser callbacks ----------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        if not self._lane_takes():
            super().on_headers_complete()
            return
        self.head_ended()
        self._keep_alive = self.parser.should_keep_alive()
        self._lane_body = bytearray()
        self.cycle = None  # type: ignore[assignment]  # the last one is complete: no stale state

    def on_body(self, body: bytes) -> None:
        gathered = self._lane_body
        if gathered is None:
            super().on_body(body)
            return
        self.body_arrived()
        gathered += body
        if len(gathered) > self._lane_cap():
            self._to_uvicorn()

    def on_message_complete(self) -> None:
        gathered = self._lane_body
        if gathered is None:
            super().on_message_complete()
            return
        self.message_ended()
        self._lane_body = None
        self._start(bytes(gathered))

    # -- connection ----------------------------------------------------------------------------

    def connection_lost(self, exc: Exception | None) -> None:
        direct, self._direct = self._direct, None
        if direct is not None and not direct.response_complete:
            direct.disconnected()
        if isinstance(self.cycle, DirectRequest):
            self.cycle = None  # uvicorn's own handling is for its own cycles
        super().connection_lost(exc)

    def shutdown(self) -> None:
        cycle = self.cycle
        if isinstance(cycle, DirectRequest) and not cycle.response_complete:
            cycle.stop_keeping_alive()  # closed once its answer is complete
            return
        if self._lane_body is not None:
            self._keep_alive = False  # its body is on the way: answered, then closed
            return
        super().shutdown()

    # -- the lane ------------------------------------------------------------------------------

    def _lane_takes(self) -> bool:
        lane = self.lane
        if lane is None or self.url != lane.path or self.expect_100_continue or self.root_path:
            return False
        parser = self.parser
        if parser.get_method() != b"POST" or parser.get_http_version() != "1.1" or parser.should_upgrade():
            return False
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            return False  # pipelined behind an answer under way: uvicorn queues it
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            return False  # uvicorn answers 503
        # A body the lane would gather past its cap goes to uvicorn's cycle, which runs the
        # checks (Host, Origin, token, the declared size) before it reads any of it.
        for name, value in self.headers:
            if name == b"content-length":
                return value.isdigit() and int(value) <= self._lane_cap()
        return True  # chunked: gathered up to the cap, then handed over

    def _lane_cap(self) -> int:
        assert self.lane is not None
        return min(self.lane.max_body, LANE_MAX_BODY)

    def _to_uvicorn(self) -> None:
        """Hands a request the lane took back to uvicorn, with what it has of the body."""
        gathered, self._lane_body = self._lane_body, None
        LimitedHttpToolsProtocol.on_headers_complete(self)
        if not self._keep_alive:  # the server began to stop meanwhile
            self.cycle.keep_alive = False
        if gathered:
            LimitedHttpToolsProtocol.on_body(self, bytes(gathered))

    def _start(self, body: bytes) -> None:
        lane = self.lane
        assert lane is not None
        request = DirectRequest(
            self, body, keep_alive=self._keep_alive, default_headers=self.server_state.default_headers
        )
        self.cycle = self._direct = request  # type: ignore[assignment]
        lane.served += 1
        # This message's scope (uvicorn makes one per message): by the time the steady lane hands
        # a request over, the protocol's may be a pipelined request's.
        scope: Scope = self.scope  # type: ignore[assignment]  # uvicorn's TypedDict, an ASGI scope
        scope["method"] = "POST"
        scope["path"] = lane.path_text
        scope["raw_path"] = lane.path
        scope["query_string"] = b""
        steady = lane.steady
        if steady is not None and steady.take(request, self.headers, body, partial(self._run, request, scope)):
            return
        self._run(request, scope, lane.app, self.headers)

    def _run(self, request: DirectRequest, scope: Scope, app: ASGIApp, headers: list[tuple[bytes, bytes]]) -> None:
        """``request`` served by ``app`` as the connection's task (``headers``: as the app sees them)."""
        scope["headers"] = headers
        task = self.loop.create_task(request.run(app, scope))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)


def router_protocol(lane: DirectLane | None, **limits: Any) -> type[RouterHttpProtocol]:
    """The protocol class to pass as uvicorn's ``http``: ``lane`` serves /mcp POSTs (None: all go
    through uvicorn's cycle), ``limits`` as ``limits.limited_protocol`` takes them."""
    from router.http.limits import limited_protocol

    base = limited_protocol(**limits)

    class Router(RouterHttpProtocol, base):  # type: ignore[valid-type, misc]
        pass

    Router.lane = lane
    return Router
