"""Health checks against the real worker: node answers them while a tool call runs, and a node
that stops answering (stopped, or its event loop stuck) is restarted, its session carried on by
a Claude-Code-shaped client as after any crash."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any, Final

import pytest

import router.sessions.upkeep
import workers.health
from tests.e2e.cc_steps import WORKER_GONE, base_of, carries_on, signed_in_and_saved, worker_pid
from tests.e2e.claude_code import ClaudeCodeClient
from tests.support import RouterThread, dead, playwright_router, wait_for

HEALTH_EVERY: Final = 0.3  # seconds between checks
PROBE_WITHIN: Final = 1.0  # node answers in milliseconds, on this loaded machine too
WEDGED_WITHIN: Final = 30.0  # three missed probes, the restart and the resume


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(workers.health, "PROBE_TIMEOUT", PROBE_WITHIN)
        state = tmp_path_factory.mktemp("health")
        with playwright_router(state, chromium, idle_timeout=600, health_interval=HEALTH_EVERY) as r:
            yield r


def test_a_worker_waiting_on_its_browser_answers_its_health_checks(
    checked: RouterThread, pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    answered: list[bool] = []

    async def counted_probe(worker: Any) -> bool:
        answered.append(await workers.health.probe(worker))
        return answered[-1]

    monkeypatch.setattr(router.sessions.upkeep, "probe", counted_probe)
    with ClaudeCodeClient(checked.url) as cc:
        cc.call("browser_navigate", url=f"{pages}/app?login=busy")
        node = worker_pid(base_of(checked), cc.session_id)
        checks = len(answered)
        text, _ = cc.call("browser_wait_for", time=3)  # node waits on the page meanwhile
        assert "### Error" not in text, text
        assert len(answered) >= checks + 3 and all(answered), answered
        assert worker_pid(base_of(checked), cc.session_id) == node


def test_a_stopped_worker_is_restarted_and_the_conversation_carries_on(checked: RouterThread, pages: str) -> None:
    with ClaudeCodeClient(checked.url) as cc:
        before = signed_in_and_saved(cc, checked, pages, "wedged")
        node = worker_pid(base_of(checked), cc.session_id)
        assert node is not None
        os.killpg(node, signal.SIGSTOP)  # node and its browser: a whole worker that serves nothing
        try:
            wait_for(lambda: worker_pid(base_of(checked), cc.session_id) != node, timeout=WEDGED_WITHIN)
        finally:
            with contextlib.suppress(ProcessLookupError):  # a group being ended must not stay stopped
                os.killpg(node, signal.SIGCONT)
        carries_on(cc, before, checked)
        assert worker_pid(base_of(checked), cc.session_id) not in (None, node)
        wait_for(lambda: dead(node), timeout=WORKER_GONE)


