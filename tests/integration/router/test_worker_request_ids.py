"""The worker's requests reach the client under ids never used twice in its session, and each
answer goes back to the worker session that asked, under that worker's own id.

Every worker session numbers its requests from 0: after the worker forgot the client's session
and the router opened a new one there, the client was asked ``roots/list`` under id 0 again, and
its late answer to the old worker session's question reached the new one, which took it for the
answer to its own. The stand-in worker's ``roots`` tool asks the client on the GET stream and
returns what it was answered: what the worker took for its answer.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

import httpx

from router.sessions.roots import ROUTER_ID_PREFIX
from router.sessions.table import Session
from tests.integration.router.test_session_stream import HeldStream, open_session
from tests.integration.router.test_worker_session_reopen import forget_worker_session, roots_call
from tests.support import RawClient, RouterThread, auth_headers, iter_sse, wait_for

QUESTION_WAIT: Final = 10.0


class AskedStream:
    """A client's GET stream held in a thread; the workers' questions wait in ``questions`` for
    the test to answer (the router's own roots/list is answered at once)."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.questions: queue.Queue[dict[str, Any]] = queue.Queue()
        self.opened = threading.Event()
        self._http = httpx.Client(timeout=30, trust_env=False)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> AskedStream:
        self._thread.start()
        assert self.opened.wait(10), "the GET stream did not open"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():  # a test that failed before its DELETE: that ends the stream
            self.client.delete()
        self._thread.join(timeout=10)
        self._http.close()
        assert not self._thread.is_alive()

    def _run(self) -> None:
        headers = {"accept": "text/event-stream", "mcp-session-id": self.client.session_id or "", **auth_headers()}
        try:
            with self._http.stream("GET", self.client.url, headers=headers) as response:
                self.opened.set()
                for event in iter_sse(response):
                    if "method" not in event or "id" not in event:
                        continue
                    if str(event["id"]).startswith(ROUTER_ID_PREFIX):
                        self.answer(event["id"], "file:///router")
                    else:
                        self.questions.put(event)
        except httpx.HTTPError:
            pass  # ended by the DELETE
        finally:
            self.opened.set()

    def asked_in(self, calls: ThreadPoolExecutor, request_id: int) -> tuple[Future[str], dict[str, Any]]:
        """The stand-in's ``roots`` tool called in ``calls``, and the question it asked the client."""
        call = calls.submit(roots_call, self.client.url, self.client.session_id or "", request_id)
        return call, self.questions.get(timeout=QUESTION_WAIT)

    def answer(self, request_id: Any, uri: str) -> int:
        body = {"jsonrpc": "2.0", "id": request_id, "result": {"roots": [{"uri": uri}]}}
        with RawClient(self.client.url) as other:
            other.session_id = self.client.session_id
            return other.post(body).status_code


def relayed(router: RouterThread, client: RawClient) -> Session:
    """The client's session, its worker started and the worker's stream relayed to the client."""
    session = router.manager.sessions.get(client.session_id)
    client.start_worker()
    wait_for(session.relay_ready.is_set, timeout=10)
    return session


def test_two_worker_sessions_ask_the_client_under_different_ids(fake_router: RouterThread) -> None:
    router = fake_router
    with open_session(router) as c:
        stream = HeldStream(c.url, c.session_id or "", "ids").start()
        assert c.text("roots") == "file:///ids/1"
        session = router.manager.sessions.get(c.session_id)
        forgotten = forget_worker_session(session)
        assert c.text("roots") == "file:///ids/2"  # asked by the worker session opened instead
        assert session.worker_session_id != forgotten
        assert len(stream.asked) == 2
        assert stream.asked[0] != stream.asked[1], stream.asked  # both worker sessions' first request
        wait_for(lambda: stream.answer_statuses == [202, 202], timeout=5)
        assert c.delete().status_code == 200
        stream.join()


def test_a_late_answer_to_the_old_worker_session_does_not_reach_the_new_one(fake_router: RouterThread) -> None:
    with open_session(fake_router) as c, AskedStream(c) as stream, ThreadPoolExecutor(2) as calls:
        session = relayed(fake_router, c)
        # The old worker session asks; the client has not answered when the worker forgets it.
        first, old = stream.asked_in(calls, 901)
        forget_worker_session(session)
        first.result(timeout=QUESTION_WAIT + 5)  # its session gone, the call ends one way or another
        # The new worker session asks too; the client's late answer to the old question comes in
        # first, then its answer to the new one.
        second, new = stream.asked_in(calls, 902)
        assert stream.answer(old["id"], "file:///late") == 202
        assert stream.answer(new["id"], "file:///current") == 202
        # The worker took the answer to its own question (under its own id) and nothing else.
        assert second.result(timeout=QUESTION_WAIT + 5) == "file:///current"
        assert c.delete().status_code == 200


def test_an_answer_reaches_the_worker_under_the_id_it_asked_with(fake_router: RouterThread) -> None:
    with open_session(fake_router) as c, AskedStream(c) as stream, ThreadPoolExecutor(1) as calls:
        relayed(fake_router, c)
        call, asked = stream.asked_in(calls, 903)
        assert not isinstance(asked["id"], int), asked  # the router's id, not the worker's count
        # Answered twice: the second is the router's to drop (the worker has its answer).
        assert stream.answer(asked["id"], "file:///answered") == 202
        assert call.result(timeout=QUESTION_WAIT + 5) == "file:///answered"
        assert stream.answer(asked["id"], "file:///again") == 202
        assert c.text("echo", text="fine") == "fine"
        assert c.delete().status_code == 200
