"""A client's new GET stream takes over from its old one without touching the worker's stream: a
worker accepts one stream per session, and whatever it wrote while that stream was closing (a
``roots/list`` its tool call then waits for) would be lost. The stand-in worker counts the GET
streams each of its sessions has had (``### Streams``)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.integration.router.test_session_stream import HeldStream, open_session
from tests.support import STANDIN_WORKER_COMMAND, RouterThread, router_settings, wait_for
from workers.orphans import processes_for


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("take-over")
    settings = router_settings(state, worker_command=STANDIN_WORKER_COMMAND, idle_timeout=60.0)
    with RouterThread(settings) as router:
        yield router
    wait_for(lambda: not processes_for(state), timeout=15)


def sections(text: str) -> dict[str, str]:
    return dict(re.findall(r"### (\w+)\n(\S+)", text))


def test_the_worker_keeps_its_one_stream_across_take_overs(router: RouterThread) -> None:
    with open_session(router) as c:
        sid = c.session_id or ""
        streams = [HeldStream(c.url, sid, "first").start()]
        first = sections(c.text("browser_snapshot"))
        assert (first["Roots"], first["Streams"]) == ("file:///first/1", "1")
        for tag in ("second", "third"):
            streams.append(HeldStream(c.url, sid, tag).start())
            assert streams[-2].ended.wait(10), "the older client stream ends"
            seen = sections(c.text("browser_snapshot"))
            assert seen["Streams"] == "1", f"the worker's stream was reopened: {seen}"
        assert not streams[-1].ended.is_set()
        assert c.delete().status_code == 200
        for stream in streams:
            stream.join()
