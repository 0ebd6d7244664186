"""`mcp-router doctor`'s memory line: sessions that fit a browser each or sharing browsers, the cap
the settings set, and the hint when the cap outruns the memory available."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.cli import main
from router.cli.capacity import (
    ADDED_BROWSER_BYTES,
    ADDED_CONTEXT_BYTES,
    FIRST_BROWSER_BYTES,
    MIB,
    Capacity,
    sessions_that_fit,
)
from router.cli.doctor import check_memory

GIB = 1024 * MIB


def test_a_browser_each_pays_the_first_browser_whole_and_each_further_one_less() -> None:
    assert sessions_that_fit(FIRST_BROWSER_BYTES - 1, 1) == 0
    assert sessions_that_fit(FIRST_BROWSER_BYTES, 1) == 1
    eight = FIRST_BROWSER_BYTES + 7 * ADDED_BROWSER_BYTES
    assert eight == 1530 * MIB  # measured: 1,461 MiB for 8 workers
    assert sessions_that_fit(eight, 1) == 8
    assert sessions_that_fit(eight - 1, 1) == 7


def test_sharing_fills_a_browser_with_contexts_before_starting_another() -> None:
    one_full = FIRST_BROWSER_BYTES + 7 * ADDED_CONTEXT_BYTES
    assert one_full == 515 * MIB  # measured: 470 MiB for one --isolated worker with 8 sessions
    assert sessions_that_fit(FIRST_BROWSER_BYTES - 1, 8) == 0
    assert sessions_that_fit(FIRST_BROWSER_BYTES, 8) == 1
    assert sessions_that_fit(FIRST_BROWSER_BYTES + 3 * ADDED_CONTEXT_BYTES, 8) == 4
    assert sessions_that_fit(one_full - 1, 8) == 7
    assert sessions_that_fit(one_full, 8) == 8
    # A second browser costs what an added worker does, then its contexts.
    assert sessions_that_fit(one_full + ADDED_BROWSER_BYTES - 1, 8) == 8
    assert sessions_that_fit(one_full + ADDED_BROWSER_BYTES, 8) == 9
    assert sessions_that_fit(one_full + ADDED_BROWSER_BYTES + 7 * ADDED_CONTEXT_BYTES, 8) == 16
    assert sessions_that_fit(8 * GIB, 1) == 47
    assert sessions_that_fit(8 * GIB, 8) == 184  # 23 browsers of 8: several times more than a browser each


@given(available=st.integers(0, 256 * GIB), per_browser=st.integers(1, 200))
def test_sharing_never_fits_fewer_and_more_memory_never_fits_fewer(available: int, per_browser: int) -> None:
    fit = sessions_that_fit(available, per_browser)
    assert fit >= sessions_that_fit(available, 1)
    assert sessions_that_fit(available + ADDED_CONTEXT_BYTES, per_browser) >= fit
    capacity = Capacity(available, per_browser, max_live_workers=1)
    suggested = Capacity(available, per_browser, capacity.workers_that_fit)
    assert suggested.cap <= fit or suggested.max_live_workers == 1


def test_the_cap_is_workers_times_sessions_per_browser() -> None:
    assert Capacity(8 * GIB, 1, max_live_workers=13).cap == 13
    assert Capacity(8 * GIB, 4, max_live_workers=13).cap == 52
    assert Capacity(None, 4, max_live_workers=13).cap == 52


def test_the_memory_line_gives_both_modes_and_the_setting() -> None:
    alone = check_memory(Capacity(8 * GIB, 1, max_live_workers=13))
    assert alone.ok and not alone.warning
    assert "8.0 GiB available holds ~47 more sessions with a browser each, ~184 sharing 8 to a browser" in alone.message
    assert "at most 13 live (--max-live-workers 13, a browser each)" in alone.message
    shared = check_memory(Capacity(8 * GIB, 4, max_live_workers=13))
    assert shared.ok and not shared.warning
    assert f"~{sessions_that_fit(8 * GIB, 4)} sharing 4 to a browser" in shared.message
    assert "at most 52 live (--max-live-workers 13 × --sessions-per-browser 4)" in shared.message


def test_a_cap_past_the_memory_is_a_hint_with_a_cap_that_fits() -> None:
    over = check_memory(Capacity(2 * GIB, 8, max_live_workers=40))
    fit = sessions_that_fit(2 * GIB, 8)
    assert over.ok and over.warning and over.line().startswith("! ")
    assert "at most 320 live" in over.message and "more than fit" in over.message
    assert f"--max-live-workers {fit // 8} stays within it" in over.fix
    assert (fit // 8) * 8 <= fit < (fit // 8 + 1) * 8


def test_unknown_memory_is_a_hint_naming_the_cap() -> None:
    unknown = check_memory(Capacity(None, 1, max_live_workers=8))
    assert unknown.ok and unknown.warning
    assert "cannot be read" in unknown.message and "at most 8 live" in unknown.message


def test_a_bad_setting_is_a_finding_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_ROUTER_SESSIONS_PER_BROWSER", "0")
    assert main(["doctor"]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("✗ setting sessions_per_browser: ")
    assert line.endswith("fix: correct MCP_ROUTER_SESSIONS_PER_BROWSER or its flag")
