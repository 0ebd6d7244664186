"""The tool policy when sessions share browsers: code that reaches the whole browser stays off."""

from __future__ import annotations

from typing import Final

from router.http.tool_policy import SHARED_BROWSER_REFUSED, ToolPolicy

UNSAFE: Final = "browser_run_code_unsafe"


def test_running_code_is_refused_on_shared_browsers_even_when_allowed() -> None:
    assert UNSAFE in SHARED_BROWSER_REFUSED
    shared = ToolPolicy.build(allow=[UNSAFE, "browser_file_upload"], shared_browser=True)
    assert not shared.allows(UNSAFE)
    assert shared.allows("browser_file_upload"), "its file names are confined instead (file_arguments.py)"
    assert "share browsers" in shared.refusal(UNSAFE) and "every context" in shared.refusal(UNSAFE)
    listed = shared.filter_list({"tools": [{"name": UNSAFE}, {"name": "browser_navigate"}]})
    assert listed == {"tools": [{"name": "browser_navigate"}]}


def test_one_browser_per_session_keeps_what_the_user_allowed() -> None:
    own = ToolPolicy.build(allow=[UNSAFE])
    assert own.allows(UNSAFE)
    assert own == ToolPolicy.build(allow=[UNSAFE], shared_browser=False)
    # A tool hidden for another reason is refused in the same words as ever.
    assert ToolPolicy.build(deny=["echo"]).refusal("echo") == "Tool 'echo' is not available through this router"
    assert ToolPolicy.build(shared_browser=True).refusal("echo") == "Tool 'echo' is not available through this router"
