"""The typed client's error tree and checks, against a stand-in router (respx routes)."""

from __future__ import annotations

import email.utils
import json
import subprocess
import sys
import time
from typing import Any

import anyio
import httpx
import pytest

from router.client import (
    BrowserSession,
    CallTimeout,
    ConnectionFailed,
    InvalidArgument,
    RequestRejected,
    RouterError,
    ServiceBusy,
    SessionExpired,
    ToolFailed,
)
from router.client._connection import retry_after_seconds
from tests.integration.client.stand_in import SESSION_NOT_FOUND, StandInRouter, error, result, text_result
from tests.support import ROOT, spare_port

TOKEN = "client-token"


@pytest.fixture
def router() -> StandInRouter:
    return StandInRouter()


def session(router: StandInRouter, **kw: Any) -> BrowserSession:
    return BrowserSession(router.url, token=TOKEN, transport=router.transport, **kw)


def request_id(request: httpx.Request) -> Any:
    return json.loads(request.content)["id"]


async def test_a_call_carries_the_token_and_the_session_and_ends_it_on_exit(router: StandInRouter) -> None:
    async with session(router) as b:
        page = await b.navigate("https://example.com/")
        assert b.session_id == "session-1"
    assert page.url == "https://example.com/" and page.ref_id == "ref-1"
    assert router.initialize_headers[0]["authorization"] == f"Bearer {TOKEN}"
    assert router.calls == [("session-1", {"name": "browser_navigate", "arguments": {"url": "https://example.com/"}})]
    assert router.deleted == ["session-1"]


async def test_404_is_session_expired(router: StandInRouter) -> None:
    router.tool_answer = lambda request, params: error(404, SESSION_NOT_FOUND, "Session not found")
    async with session(router, end_on_exit=False) as b:
        with pytest.raises(SessionExpired) as caught:
            await b.snapshot()
    assert caught.value.session_id == "session-1"
    assert len(router.sessions) == 1  # no re-initialize unless asked


async def test_404_reinitializes_once_when_asked(router: StandInRouter) -> None:
    def expire_the_first(request: httpx.Request, params: dict[str, Any]) -> httpx.Response:
        if request.headers["mcp-session-id"] == "session-1":
            return error(404, SESSION_NOT_FOUND, "Session not found")
        return result(request_id(request), text_result("### Page\n- Page URL: about:blank\n", ref_id="ref-2"))

    router.tool_answer = expire_the_first
    async with session(router, reinitialize_on_expiry=True) as b:
        page = await b.navigate("about:blank")
        assert b.session_id == "session-2"
    assert page.ref_id == "ref-2" and page.url == "about:blank"
    assert [sid for sid, _ in router.calls] == ["session-1", "session-2"]
    assert router.initialize_headers[1]["authorization"] == f"Bearer {TOKEN}"
    assert router.deleted == ["session-2"]  # the expired one is not deleted again


async def test_a_second_404_after_reinitializing_is_raised(router: StandInRouter) -> None:
    router.tool_answer = lambda request, params: error(404, SESSION_NOT_FOUND, "Session not found")
    async with session(router, reinitialize_on_expiry=True) as b:
        with pytest.raises(SessionExpired) as caught:
            await b.tabs()
    assert caught.value.session_id == "session-2"
    assert len(router.sessions) == 2


@pytest.mark.parametrize("status", [503, 429])
async def test_busy_is_service_busy_with_retry_after_and_the_session_stays(router: StandInRouter, status: int) -> None:
    answers = iter([error(status, -32603, "At capacity: 4 workers", **{"retry-after": "7"})])
    router.tool_answer = lambda request, params: next(
        answers, result(request_id(request), text_result("### Result\n\"ok\""))
    )
    async with session(router) as b:
        with pytest.raises(ServiceBusy) as caught:
            await b.snapshot()
        assert (await b.evaluate("() => 'ok'")).value == "ok"
    assert caught.value.status == status and caught.value.retry_after == 7.0
    assert "At capacity" in caught.value.message and "retry after 7 s" in caught.value.message


async def test_a_busy_router_at_open_is_service_busy(router: StandInRouter) -> None:
    router.mock.post(router.url).mock(return_value=error(503, -32603, "Too many sessions", **{"retry-after": "3"}))
    with pytest.raises(ServiceBusy) as caught:
        async with session(router):
            pass
    assert caught.value.retry_after == 3.0


async def test_concurrent_calls_each_get_their_own_status(router: StandInRouter) -> None:
    def busy_for_snapshots(request: httpx.Request, params: dict[str, Any]) -> httpx.Response:
        if params["name"] == "browser_snapshot":
            return error(503, -32603, "At capacity", **{"retry-after": "1"})
        return result(request_id(request), text_result("### Result\n[]"))

    router.tool_answer = busy_for_snapshots
    outcomes: dict[str, Any] = {}

    async def run(name: str, call: Any) -> None:
        try:
            outcomes[name] = await call
        except RouterError as exc:
            outcomes[name] = exc

    async with session(router) as b, anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(run, f"snapshot{i}", b.snapshot())
            tg.start_soon(run, f"tabs{i}", b.tabs())
    assert all(isinstance(outcomes[f"snapshot{i}"], ServiceBusy) for i in range(3)), outcomes
    assert all(outcomes[f"tabs{i}"].tabs == [] for i in range(3)), outcomes


def test_retry_after_as_an_http_date() -> None:
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    seconds = retry_after_seconds(in_a_minute)
    assert seconds is not None and 55 <= seconds <= 61
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


async def test_connection_refused_is_connection_failed() -> None:
    with pytest.raises(ConnectionFailed) as caught:
        async with BrowserSession(f"http://127.0.0.1:{spare_port()}/mcp", token=TOKEN):
            pass
    assert "cannot reach the router" in caught.value.message


async def test_a_broken_connection_fails_one_call_not_the_session(router: StandInRouter) -> None:
    def refuse_once(request: httpx.Request, params: dict[str, Any]) -> httpx.Response:
        if len(router.calls) == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return result(request_id(request), text_result("### Result\n2"))

    router.tool_answer = refuse_once
    async with session(router) as b:
        with pytest.raises(ConnectionFailed):
            await b.evaluate("() => 1 + 1")
        assert (await b.evaluate("() => 1 + 1")).value == 2


async def test_no_answer_in_time_is_call_timeout(router: StandInRouter) -> None:
    never = anyio.Event()

    async def stall(request: httpx.Request, params: dict[str, Any]) -> httpx.Response:
        await never.wait()
        raise AssertionError("unreachable")

    router.tool_answer = stall
    async with session(router, timeout=5) as b:
        started = time.monotonic()
        with pytest.raises(CallTimeout) as caught:
            await b.snapshot(timeout=0.2)
        assert time.monotonic() - started < 4  # the call's own timeout, not the session's
    assert caught.value.timeout == 0.2


async def test_is_error_is_tool_failed_with_the_tools_text(router: StandInRouter) -> None:
    text = "### Error\nError: Ref e9 not found in the current page snapshot."
    router.tool_answer = lambda request, params: result(request_id(request), text_result(text, is_error=True))
    async with session(router) as b:
        with pytest.raises(ToolFailed) as caught:
            await b.click("Send button", "e9")
    assert caught.value.tool == "browser_click" and caught.value.text == text and caught.value.ref_id == "ref-1"
    assert "Ref e9 not found" in caught.value.message


async def test_an_error_leaves_the_session_block_unwrapped_and_the_session_ended(router: StandInRouter) -> None:
    text = "### Error\nError: bad"
    router.tool_answer = lambda request, params: result(request_id(request), text_result(text, is_error=True))
    with pytest.raises(ToolFailed):  # not an ExceptionGroup from the session's task group
        async with session(router) as b:
            await b.evaluate("() => { throw new Error('bad') }")
    assert router.deleted == ["session-1"]


async def test_a_wrong_token_is_request_rejected_at_open(router: StandInRouter) -> None:
    router.mock.post(router.url).mock(return_value=error(401, -32600, "Unauthorized: a token is required"))
    with pytest.raises(RequestRejected) as caught:
        async with session(router):
            pass
    assert caught.value.status == 401 and "Unauthorized" in caught.value.message


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda b: b.navigate("example.com"), "no scheme"),
        (lambda b: b.navigate("ftp://example.com/"), "absolute http(s)"),
        (lambda b: b.navigate(""), "needs a URL"),
        (lambda b: b.click("Send button", " "), "click target"),
        (lambda b: b.snapshot(timeout=0), "timeout"),
        (lambda b: b.snapshot(timeout=0.0005), "timeout"),
        (lambda b: b.snapshot(timeout=601), "timeout"),
        (lambda b: b.console("fatal"), "console level"),
        (lambda b: b.evaluate(""), "evaluate script"),
        (lambda b: b.content("", search_for="x"), "ref_id"),
        (lambda b: b.fill_form([]), "at least one field"),
        (lambda b: b.fill_form([{"name": "Name", "target": "e3", "type": "textarea", "value": "x"}]), "field 0"),
    ],
)
async def test_bad_input_is_refused_before_sending(router: StandInRouter, call: Any, says: str) -> None:
    async with session(router) as b:
        with pytest.raises(InvalidArgument, match=says.replace("(", r"\(").replace(")", r"\)")):
            await call(b)
    assert router.calls == []


def test_bad_session_arguments_are_refused_at_once() -> None:
    with pytest.raises(InvalidArgument, match="absolute http"):
        BrowserSession("127.0.0.1:4000/mcp")
    with pytest.raises(InvalidArgument, match="timeout"):
        BrowserSession("http://127.0.0.1:4000/mcp", timeout=0)
    assert issubclass(InvalidArgument, ValueError) and issubclass(InvalidArgument, RouterError)


def test_importing_the_client_loads_neither_the_sdk_nor_the_server() -> None:
    code = (
        "import sys, router.client\n"
        "heavy = {'mcp', 'httpx2', 'starlette', 'uvicorn', 'aiosqlite'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
