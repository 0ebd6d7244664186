"""Router-answered tools and response rewriting, with the stand-in worker."""

from __future__ import annotations

from pathlib import Path

from tests.support import RawClient, RouterThread, router_settings


def test_tools_list_carries_router_tools(fake_router: RouterThread) -> None:
    with RawClient(fake_router.url) as c:
        c.initialize()
        names = [t["name"] for t in c.request("tools/list")["result"]["tools"]]
        assert {"echo", "get_content", "get_console_content", "create_new_session"} <= set(names)
        assert len(names) == len(set(names))
        c.delete()


def test_tool_results_carry_their_ref_id(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir, record=True)) as router, RawClient(router.url) as c:
        c.initialize()
        answer = c.call("echo", text="hi")
        ref = answer["result"]["_meta"]["mcp-router/refId"]
        assert answer["result"]["content"][0]["text"] == "hi"
        # A ref of a call without a page snapshot: a tool error that says so, not a protocol error.
        got = c.call("get_content", ref_id=ref)
        assert got["result"]["isError"] is True
        unknown = c.call("get_console_content", ref_id="00000000-0000-0000-0000-000000000000")
        assert unknown["result"]["isError"] is True
        c.delete()


def test_router_tools_without_recording_say_so(fake_router: RouterThread) -> None:
    with RawClient(fake_router.url) as c:
        c.initialize()
        answer = c.call("get_content", ref_id="x")
        assert answer["result"]["isError"] is True
        assert "Recording is off" in answer["result"]["content"][0]["text"]
        c.delete()
