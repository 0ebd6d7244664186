"""Which worker tools a conversation sees and may call: hidden tools are absent and refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from router.http.exchange import INVALID_PARAMS
from router.http.tool_policy import DANGEROUS_TOOLS, NETWORK_CAP_TOOLS, STORAGE_CAP_TOOLS, ToolPolicy, user_caps
from router.record.tools import DEFINITIONS, NAMES
from tests.support import RawClient, RouterThread, router_settings, wait_for
from workers.orphans import processes_for

UNSAFE: Final = "browser_run_code_unsafe"
VERSION: Final = "2025-06-18"
ROUTER_TOOLS: Final = [d["name"] for d in DEFINITIONS]
STORAGE_SAMPLE: Final = ("browser_storage_state", "browser_set_storage_state", "browser_cookie_get")


# -- ToolPolicy.build ------------------------------------------------------------------------------


def test_defaults_hide_storage_and_unsafe_tools_only() -> None:
    policy = ToolPolicy.build()
    assert UNSAFE in DANGEROUS_TOOLS
    assert not policy.allows(UNSAFE)
    for name in STORAGE_SAMPLE:
        assert name in STORAGE_CAP_TOOLS and not policy.allows(name)
    # The router's own route (restore.py) is no tool of the conversation's.
    assert "browser_route" in NETWORK_CAP_TOOLS and not policy.allows("browser_route")
    assert policy.allows("browser_navigate") and policy.allows("get_content") and policy.allows(None)


@pytest.mark.parametrize(
    "args",
    [
        ["--caps", "storage"],
        ["--caps=storage"],
        ["--caps=storage,vision"],
        ["--caps", "vision, storage"],
        ["--headless", "--caps", "vision", "--caps=storage"],
    ],
)
def test_storage_tools_show_when_the_user_asked_for_the_capability(args: list[str]) -> None:
    assert "storage" in user_caps(args)
    policy = ToolPolicy.build(worker_args=args)
    assert all(policy.allows(name) for name in STORAGE_CAP_TOOLS)
    assert not policy.allows(UNSAFE), "asking for storage does not allow running code"


@pytest.mark.parametrize("args", [[], ["--caps", "vision"], ["--caps=vision,pdf"], ["--caps"], ["storage"]])
def test_storage_tools_stay_hidden_without_the_capability(args: list[str]) -> None:
    assert "storage" not in user_caps(args)
    policy = ToolPolicy.build(worker_args=args)
    assert not any(policy.allows(name) for name in STORAGE_CAP_TOOLS)


def test_network_tools_show_only_when_the_user_asked_for_the_capability() -> None:
    assert all(ToolPolicy.build(worker_args=["--caps=vision,network"]).allows(n) for n in NETWORK_CAP_TOOLS)
    assert not any(ToolPolicy.build(worker_args=["--caps", "storage"]).allows(n) for n in NETWORK_CAP_TOOLS)


def test_allow_and_deny_by_name() -> None:
    assert ToolPolicy.build(allow=[UNSAFE]).allows(UNSAFE)
    assert ToolPolicy.build(allow=["browser_cookie_get"]).allows("browser_cookie_get")
    assert not ToolPolicy.build(allow=["browser_cookie_get"]).allows("browser_cookie_set")
    denied = ToolPolicy.build(deny=["browser_evaluate"])
    assert not denied.allows("browser_evaluate") and denied.allows("browser_navigate")
    # Allowing a name wins over denying it (and over the built-in hiding).
    assert ToolPolicy.build(deny=["browser_evaluate"], allow=["browser_evaluate"]).allows("browser_evaluate")


def test_filter_list_keeps_the_workers_order_and_other_fields() -> None:
    policy = ToolPolicy.build(deny=["b"])
    listed = {"tools": [{"name": "c"}, {"name": "b"}, {"name": UNSAFE}, {"name": "a"}], "nextCursor": None}
    assert policy.filter_list(listed) == {"tools": [{"name": "c"}, {"name": "a"}], "nextCursor": None}
    assert listed["tools"][1] == {"name": "b"}, "the worker's answer itself is not changed"
    assert policy.filter_list({"error": "x"}) == {"error": "x"}


# -- through a router ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    """``echo`` and ``recall`` denied, ``recall`` allowed again: ``echo`` is the hidden one."""
    state = tmp_path_factory.mktemp("policy")
    settings = router_settings(state, deny_tools=["echo", "recall"], allow_tools=["recall"])
    with RouterThread(settings) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=15)


def test_a_denied_tool_is_absent_and_refused_without_a_worker(policed: RouterThread) -> None:
    state = Path(policed.settings.state_dir)
    with RawClient(policed.url) as c:
        c.initialize()
        names = [t["name"] for t in c.request("tools/list")["result"]["tools"]]
        assert "echo" not in names
        assert "whoami" in names and "get_content" in names
        answer = c.call("echo", text="hello")
        assert answer["error"]["code"] == INVALID_PARAMS == -32602, answer
        assert "echo" in answer["error"]["message"]
        assert not processes_for(state, c.session_id), "a refused call starts no worker"
        # Once the worker is up, its own tools/list is filtered the same way, and the call refused.
        c.start_worker()
        names = [t["name"] for t in c.request("tools/list")["result"]["tools"]]
        assert "echo" not in names and "recall" in names
        assert c.call("echo", text="hello")["error"]["code"] == INVALID_PARAMS
        assert c.delete().status_code == 200


def test_an_allowed_tool_comes_back(policed: RouterThread) -> None:
    with RawClient(policed.url) as c:
        c.initialize()
        names = [t["name"] for t in c.request("tools/list")["result"]["tools"]]
        assert "recall" in names
        assert c.text("remember", key="k", value="v") == "ok"
        assert c.text("recall", key="k") == "v"
        assert c.delete().status_code == 200


def test_with_nothing_hidden_the_cached_listing_stays_the_workers(state_dir: Path) -> None:
    """The router's tools are added to each answer, never to the cached worker answer itself."""
    everything = sorted(DANGEROUS_TOOLS | STORAGE_CAP_TOOLS | NETWORK_CAP_TOOLS)
    with RouterThread(router_settings(state_dir, allow_tools=everything)) as router:
        cached = router.manager.handshakes.get(VERSION)
        worker_names = [t["name"] for t in cached["tools"]["tools"]]
        with RawClient(router.url) as c:
            c.initialize(version=VERSION)
            first = c.request("tools/list")["result"]
            assert c.request("tools/list")["result"] == first
            assert [t["name"] for t in first["tools"]] == [*worker_names, *ROUTER_TOOLS]
            assert not processes_for(state_dir, c.session_id)
            assert c.delete().status_code == 200
        assert [t["name"] for t in router.manager.handshakes.get(VERSION)["tools"]["tools"]] == worker_names
        on_disk = json.loads(router.manager.handshakes.path.read_text())["versions"]
        assert all(not NAMES & {t["name"] for t in entry["tools"]["tools"]} for entry in on_disk.values())
