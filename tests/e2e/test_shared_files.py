"""Sessions sharing one real @playwright/mcp worker (``--sessions-per-browser``) cannot reach each
other's files: the worker lets every session read and write anywhere in its one output dir, so the
router keeps each session's file names to its own folder there (router/http/file_arguments.py)
and refuses code that runs beside the whole browser (router/http/tool_policy.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import pytest

from router.http.exchange import INVALID_PARAMS
from router.http.file_arguments import READ, WRITTEN
from router.layout import own_folder
from tests.support import PAGES, RawClient, RouterThread, find_ref, serve_pages
from tests.support.hosted import host_output, two_clients
from tests.support.routers import playwright_router

UNSAFE: Final = "browser_run_code_unsafe"
UPLOAD: Final = "browser_file_upload"
# Every capability of @playwright/mcp 0.0.83, so that the worker lists every tool it has.
ALL_CAPS: Final = "storage,network,pdf,vision,devtools,testing,config"
VERSION: Final = "2025-06-18"
# A page that says which file it was given.
UPLOAD_PAGE: Final = """<!doctype html><html><head><title>Upload</title></head><body>
<input type="file" id="f" aria-label="Pick a file"
 onchange="out.textContent = 'got ' + this.files[0].name + ' ' + this.files[0].size">
<p id="out">got nothing</p></body></html>"""
# Input properties that mention files but name none on the worker's disk: a cookie's URL path,
# where a paused test run (the testing capability) stops (<file>:<line> of the test's source), and
# a screenshot's format (else inferred from the file name).
NOT_FILES: Final = {
    ("browser_cookie_list", "path"), ("browser_cookie_set", "path"), ("browser_resume", "location"),
    ("browser_take_screenshot", "type"),
}  # fmt: skip


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serve_pages({**PAGES, "/upload": UPLOAD_PAGE}) as base:
        yield base


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[RouterThread]:
    state = tmp_path_factory.mktemp("shared-files")
    with playwright_router(
        state, chromium, sessions_per_browser=3, max_live_workers=2, idle_timeout=600.0,
        allow_tools=[UNSAFE, UPLOAD], worker_args=["--caps", ALL_CAPS],
    ) as router:  # fmt: skip
        yield router


@pytest.fixture
def pair(shared: RouterThread) -> Iterator[tuple[RawClient, RawClient]]:
    with two_clients(shared, version=VERSION) as clients:
        yield clients


def refused(client: RawClient, tool: str, **arguments: Any) -> str:
    """The router's JSON-RPC error for the call (the worker never got it): its message."""
    answer = client.call(tool, **arguments)
    assert "error" in answer and answer["error"]["code"] == INVALID_PARAMS, answer
    message: str = answer["error"]["message"]
    return message


def linked(text: str, name: str) -> str:
    """The path of the file ``name`` an answer links to (relative to the client's workspace)."""
    match = re.search(rf"\]\(([^()]*{re.escape(name)})\)", text)
    assert match, text
    return match.group(1)


def upload(client: RawClient, site: str, *paths: str) -> dict[str, Any]:
    """Opens the upload page's file chooser and answers it with ``paths``."""
    client.text("browser_navigate", url=f"{site}/upload")
    snapshot = client.text("browser_snapshot")
    client.text("browser_click", target=find_ref(snapshot, "Pick a file"), element="file input")
    return client.call(UPLOAD, paths=list(paths))


def test_one_session_cannot_read_overwrite_or_script_its_way_to_anothers_files(
    shared: RouterThread, pair: tuple[RawClient, RawClient], site: str
) -> None:
    a, b = pair
    assert "set a-secret" in a.text("browser_navigate", url=f"{site}/set?v=a-secret")
    out = host_output(shared, a)
    shot = out / linked(a.text("browser_take_screenshot", filename="a-shot.png", type="png"), "a-shot.png")
    state = out / linked(a.text("browser_storage_state", filename="a-state.json"), "a-state.json")
    assert shot.stat().st_size > 0 and "a-secret" in state.read_text()
    shot_bytes = shot.read_bytes()

    b.text("browser_navigate", url=f"{site}/second")
    assert host_output(shared, b) == out, "both sessions on one host"
    # A's saved state (its cookies): not by its path, not by a path around, not by its plain name.
    assert "own folder" in refused(b, "browser_set_storage_state", filename=str(state))
    assert "own folder" in refused(b, "browser_set_storage_state", filename=f"../{state.parent.name}/a-state.json")
    by_name = b.call("browser_set_storage_state", filename="a-state.json")
    assert by_name["result"].get("isError"), by_name  # its own folder holds no such file
    # A's screenshot: not uploaded, not overwritten.
    assert "error" in upload(b, site, str(shot)) and "own folder" in refused(b, UPLOAD, paths=[str(shot)])
    b.call(UPLOAD)  # no paths: the chooser is cancelled
    assert "own folder" in refused(b, "browser_take_screenshot", filename=str(shot))
    assert shot.read_bytes() == shot_bytes
    # Code beside the whole browser: refused although the user allowed it, and not listed.
    reason = refused(b, UNSAFE, code="async (page) => page.context().browser().contexts().length")
    assert "share browsers" in reason
    assert UNSAFE not in {t["name"] for t in b.request("tools/list")["result"]["tools"]}
    assert "cookie=none storage=none" in b.text("browser_navigate", url=f"{site}/get")

    # A still reads its own, by plain name and by path.
    a.text("browser_navigate", url=f"{site}/second")
    assert "Storage state restored" in a.text("browser_set_storage_state", filename="a-state.json")
    uploaded = upload(a, site, "a-shot.png")
    assert "error" not in uploaded and not uploaded["result"].get("isError"), uploaded
    assert f"got a-shot.png {len(shot_bytes)}" in a.text("browser_snapshot")
    assert "cookie=a-secret storage=a-secret" in a.text("browser_navigate", url=f"{site}/get")
    # Where A's files are: its own folder, never the root every session shares.
    assert shot.parent == state.parent == own_folder(out, a.session_id)
    assert a.session_id not in str(shot)


def test_every_worker_tool_that_names_a_file_is_confined(shared: RouterThread) -> None:
    """The worker's own tool list, every capability on: each input that names a file is one
    file_arguments.py looks at."""
    listed = shared.manager.handshakes.get(VERSION)["tools"]["tools"]
    names = {t["name"] for t in listed}
    assert {"browser_take_screenshot", "browser_pdf_save", "browser_storage_state", UPLOAD} <= names
    naming: set[tuple[str, str]] = set()
    for tool in listed:
        for prop, schema in tool["inputSchema"].get("properties", {}).items():
            described = f"{prop} {schema.get('description', '')}".lower()
            if any(word in described for word in ("file", "path")):
                naming.add((tool["name"], prop))
    confined = {*WRITTEN.items(), *READ.items()}
    assert naming - NOT_FILES == {(tool, prop) for tool, prop in confined if tool in names}
    assert {tool for tool, _ in confined} - names == set(), "every confined tool exists"
