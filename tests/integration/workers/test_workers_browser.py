"""workers/browser.py against a real process tree: a stand-in node whose children are a browser
(Playwright's flag), one of the browser's helpers (``--type=``) and something else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import anyio
import pytest

from tests.support import wait_for
from workers.browser import BROWSER_FLAG, BrowserProcess, find_browser

SLEEPER: Final = "import time\nwhile True: time.sleep(1)"
# The stand-in node: starts its children, writes their pids (browser, helper, other), sleeps.
NODE: Final = f"""
import subprocess, sys, time
sleep = [sys.executable, "-c", {SLEEPER!r}]
kids = [
    subprocess.Popen([*sleep, "--headless", "{BROWSER_FLAG.decode()}", "--user-data-dir=/x"]),
    subprocess.Popen([*sleep, "--type=renderer", "{BROWSER_FLAG.decode()}"]),
    subprocess.Popen([*sleep, "--port", "1"]),
]
open(sys.argv[1] + ".tmp", "w").write(" ".join(str(k.pid) for k in kids))
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
while True: time.sleep(1)
"""
START_WITHIN: Final = 10.0
EXIT_WITHIN: Final = 5.0


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[int, list[int]]]:
    """The stand-in node's pid and its children's (browser, helper, other); all ended after."""
    pidfile = tmp_path / "pids"
    parent = subprocess.Popen([sys.executable, "-c", NODE, str(pidfile)], start_new_session=True)
    try:
        wait_for(pidfile.exists, timeout=START_WITHIN)
        yield parent.pid, [int(pid) for pid in pidfile.read_text().split()]
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_the_browser_is_the_child_with_playwrights_flag_and_no_type(node: tuple[int, list[int]]) -> None:
    node_pid, (browser, helper, other) = node
    assert find_browser(node_pid) == browser
    os.kill(browser, signal.SIGKILL)
    # Its zombie (node has not reaped it) still lists its cmdline as empty: not a browser any more.
    wait_for(lambda: find_browser(node_pid) is None, timeout=EXIT_WITHIN)
    assert find_browser(other) is None and find_browser(helper) is None  # no children of their own


def test_no_browser_under_a_process_that_is_gone() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert find_browser(gone.pid) is None


async def test_its_exit_is_awaited_without_polling(node: tuple[int, list[int]]) -> None:
    _, (browser, _, _) = node
    process = BrowserProcess(browser)
    try:
        with anyio.move_on_after(0.2) as early:
            await process.exited()
        assert early.cancelled_caught, "returned while the browser still ran"
        os.kill(browser, signal.SIGKILL)
        with anyio.fail_after(EXIT_WITHIN):
            await process.exited()  # its zombie counts: it has exited
    finally:
        process.close()


def test_a_process_gone_already_cannot_be_watched() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: the pid names nobody
    with pytest.raises(OSError):
        BrowserProcess(gone.pid)
