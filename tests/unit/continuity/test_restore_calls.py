"""Which control calls a resume makes on the new worker for what the session saved (the real
browser's side of each: test_resume.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from router.sessions import statefiles
from router.sessions.control import ControlSession
from router.sessions.restore import restore_browser
from router.sessions.storage_restore import sets_anything

PAGE = "http://127.0.0.1:8000/inbox"


class RecordingControl:
    """Answers every tool call with nothing, as a worker whose pages all load would."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        self.calls.append((name, arguments or {}))
        return ""


async def restore(tmp_path: Path, storage: dict[str, Any], *, fresh_profile: bool = True) -> list[str]:
    session_dir = tmp_path / "session"
    statefiles.write_state(session_dir, {"tabs": [PAGE], "current": PAGE, "ref_frame": 0, "storage": storage})
    control = RecordingControl()
    output = tmp_path / "output"
    assert await restore_browser(session_dir, cast(ControlSession, control), output, fresh_profile=fresh_profile)
    return [name for name, _ in control.calls]


async def test_nothing_saved_loads_the_page_without_a_storage_call(tmp_path: Path) -> None:
    """A warm worker's browser started on an empty profile: there is nothing to clear."""
    assert await restore(tmp_path, {"cookies": [], "origins": []}) == ["browser_navigate"]


async def test_nothing_saved_still_clears_the_sessions_own_profile(tmp_path: Path) -> None:
    """A worker spawned on the session's own profile may hold cookies the saved state does not
    (set after the last save): the storage call clears them, so the state is what was saved."""
    calls = await restore(tmp_path, {"cookies": [], "origins": []}, fresh_profile=False)
    assert calls == ["browser_set_storage_state", "browser_navigate"]


async def test_a_cookie_still_goes_in_before_the_page(tmp_path: Path) -> None:
    cookie = {"name": "sid", "value": "1", "domain": "127.0.0.1", "path": "/"}
    calls = await restore(tmp_path, {"cookies": [cookie], "origins": []})
    assert calls == ["browser_set_storage_state", "browser_navigate"]


def test_what_counts_as_something_to_set() -> None:
    origin = {"origin": "https://a.test", "localStorage": [{"name": "k", "value": "v"}]}
    assert not sets_anything({"cookies": [], "origins": [origin]}, [])  # all of it went through the tab
    assert sets_anything({"cookies": [], "origins": [origin]}, [origin])
    assert sets_anything({"cookies": [], "origins": [], "credentials": [{"id": "x"}]}, [])
    assert not sets_anything({}, [])
