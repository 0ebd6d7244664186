"""File names in tool calls on a shared worker: kept to the calling session's own folder."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any, Final

import pytest

from router.http.file_arguments import (
    READ,
    SNAPSHOT_AUTO_NAME,
    WRITTEN,
    FileRefused,
    confine,
    confined_call,
    names_files,
    workspace_of,
)
from router.layout import OWN_FOLDER_PREFIX, own_folder
from router.protocol.messages import parse

A: Final = "session-a-secret-id"
B: Final = "session-b-secret-id"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """A host's output dir, with A's folder holding a saved state."""
    path = tmp_path / "host" / "out"
    (own_folder(path, A)).mkdir(parents=True)
    (own_folder(path, A) / "state.json").write_text("{}")
    return path


def as_b(out: Path, tool: str, workspace: str | None = None, **arguments: Any) -> dict[str, Any] | None:
    return confine(tool, arguments, output_dir=out, session_id=B, workspace=workspace)


def test_the_own_folder_is_named_by_a_hash_never_by_the_id(tmp_path: Path) -> None:
    folder = own_folder(tmp_path, A)
    assert folder.parent == tmp_path and folder.name.startswith(OWN_FOLDER_PREFIX)
    assert len(folder.name) == len(OWN_FOLDER_PREFIX) + 16 and A not in folder.name
    assert own_folder(tmp_path, A) == folder != own_folder(tmp_path, B)


@pytest.mark.parametrize("name", ["shot.png", "./shot.png", "sub/../shot.png", "deep/er/shot.png"])
def test_a_relative_name_goes_to_the_own_folder(out: Path, name: str) -> None:
    changed = as_b(out, "browser_take_screenshot", filename=name, type="png")
    assert changed == {"filename": posixpath.normpath(own_folder(out, B) / name), "type": "png"}


def test_a_name_already_in_the_own_folder_is_left_as_it_is(out: Path) -> None:
    inside = str(own_folder(out, B) / "shot.png")
    assert as_b(out, "browser_take_screenshot", filename=inside) is None
    assert as_b(out, "browser_set_storage_state", filename=inside) is None


@pytest.mark.parametrize(
    "name",
    [
        "../state.json",  # the output dir's root
        f"../{own_folder(Path('x'), A).name}/state.json",  # another session's folder, by ..
        "sub/../../elsewhere.png",
        "..",
    ],
)
def test_a_relative_name_leaving_the_own_folder_is_refused(out: Path, name: str) -> None:
    for tool in ("browser_take_screenshot", "browser_set_storage_state"):
        with pytest.raises(FileRefused, match="own folder"):
            as_b(out, tool, filename=name)


def test_another_sessions_files_are_refused_by_absolute_path(out: Path) -> None:
    theirs = own_folder(out, A) / "state.json"
    with pytest.raises(FileRefused, match=r"outside this session's own folder"):
        as_b(out, "browser_set_storage_state", filename=str(theirs))
    with pytest.raises(FileRefused):
        as_b(out, "browser_storage_state", filename=str(theirs))  # overwriting it
    with pytest.raises(FileRefused):
        as_b(out, "browser_take_screenshot", filename=str(out / "page-1.png"))  # the root's files
    with pytest.raises(FileRefused):
        as_b(out, "browser_set_storage_state", filename=f"{own_folder(out, B)}/../{theirs.parent.name}/state.json")


def test_a_directory_holding_the_output_dir_is_refused(out: Path) -> None:
    """A directory upload of the output dir, or of a folder above it, would carry every session's files."""
    for folder in (out, out.parent, out.parent.parent, Path("/")):
        with pytest.raises(FileRefused):
            as_b(out, "browser_file_upload", paths=[str(folder)])


def test_a_path_outside_the_output_dir_is_left_to_the_worker(out: Path, tmp_path: Path) -> None:
    elsewhere = str(tmp_path / "project" / "report.pdf")
    assert as_b(out, "browser_pdf_save", filename=elsewhere) is None
    assert as_b(out, "browser_file_upload", paths=[elsewhere, "/etc/hostname"]) is None


def test_symlinks_are_followed_before_deciding(out: Path, tmp_path: Path) -> None:
    mine = own_folder(out, B)
    mine.mkdir()
    (mine / "theirs").symlink_to(own_folder(out, A))
    (mine / "their-state.json").symlink_to(own_folder(out, A) / "state.json")
    (tmp_path / "outside-link").symlink_to(own_folder(out, A))
    for name in ("theirs/state.json", "their-state.json", str(tmp_path / "outside-link" / "state.json")):
        with pytest.raises(FileRefused):
            as_b(out, "browser_set_storage_state", filename=name)
        with pytest.raises(FileRefused):
            as_b(out, "browser_storage_state", filename=name)
    # A link out of the output dir leads to the worker's own check, not to another session.
    (mine / "project").symlink_to(tmp_path)
    assert as_b(out, "browser_file_upload", paths=[str(mine / "project" / "x.txt")]) is None
    assert as_b(out, "browser_file_upload", paths=["project/x.txt"]) == {"paths": [str(mine / "project" / "x.txt")]}


def test_the_symlinked_output_dir_itself_is_seen_through(tmp_path: Path, out: Path) -> None:
    """The worker may know its output dir by a path through a symlink: both spellings are policed."""
    alias = tmp_path / "alias"
    alias.symlink_to(out)
    with pytest.raises(FileRefused):
        confine("browser_set_storage_state", {"filename": str(own_folder(out, A) / "state.json")},
                output_dir=alias, session_id=B, workspace=None)  # fmt: skip
    assert confine("browser_storage_state", {"filename": "s.json"}, output_dir=alias, session_id=B,
                   workspace=None) == {"filename": str(own_folder(alias, B) / "s.json")}  # fmt: skip


def test_reads_of_a_list_are_each_checked(out: Path) -> None:
    mine = str(own_folder(out, B) / "a.txt")
    assert as_b(out, "browser_file_upload", paths=[mine]) is None
    assert as_b(out, "browser_drop", paths=["a.txt", 7], target="e1") == {"paths": [mine, 7], "target": "e1"}
    with pytest.raises(FileRefused):
        as_b(out, "browser_file_upload", paths=[mine, str(own_folder(out, A) / "state.json")])
    assert as_b(out, "browser_file_upload", paths=[]) is None


def test_a_rooted_client_keeps_its_workspace(out: Path, tmp_path: Path) -> None:
    """Upstream resolves a relative name against the client's first root: it stays there, sent absolute."""
    root = str(tmp_path / "project")
    assert as_b(out, "browser_take_screenshot", workspace=root, filename="shot.png") == {
        "filename": f"{root}/shot.png"
    }
    assert as_b(out, "browser_file_upload", workspace=root, paths=["docs/a.pdf"]) == {"paths": [f"{root}/docs/a.pdf"]}
    # A root inside the output dir reaches no further than an absolute name would.
    with pytest.raises(FileRefused):
        as_b(out, "browser_set_storage_state", workspace=str(own_folder(out, A)), filename="state.json")
    with pytest.raises(FileRefused):
        as_b(out, "browser_set_storage_state", workspace=str(out), filename="x.json")


def test_the_calls_own_directory_is_resolved_and_policed(out: Path, tmp_path: Path) -> None:
    theirs = str(own_folder(out, A))
    with pytest.raises(FileRefused):
        as_b(out, "browser_set_storage_state", filename="state.json", _meta={"cwd": theirs})
    with pytest.raises(FileRefused):
        as_b(out, "browser_file_upload", paths=[""], _meta={"cwd": theirs})  # the folder itself
    with pytest.raises(FileRefused, match=r"_meta\.cwd"):
        as_b(out, "browser_set_storage_state", filename="state.json", _meta={"cwd": 3})
    meta = {"cwd": str(tmp_path), "progressToken": 1}
    assert as_b(out, "browser_pdf_save", filename="p.pdf", _meta=meta) == {
        "filename": f"{tmp_path}/p.pdf", "_meta": meta
    }  # fmt: skip
    # A relative one starts from the session's folder, as its working directory.
    assert as_b(out, "browser_pdf_save", filename="p.pdf", _meta={"cwd": "sub"}) == {
        "filename": str(own_folder(out, B) / "sub" / "p.pdf"), "_meta": {"cwd": "sub"}
    }  # fmt: skip


def test_names_the_worker_picks_itself_are_left_alone(out: Path) -> None:
    assert as_b(out, "browser_take_screenshot") is None
    assert as_b(out, "browser_take_screenshot", filename="") is None
    assert as_b(out, "browser_snapshot", filename=SNAPSHOT_AUTO_NAME) is None
    # Only browser_snapshot knows the marker: elsewhere it is a name like any other.
    assert as_b(out, "browser_pdf_save", filename=SNAPSHOT_AUTO_NAME) == {
        "filename": str(own_folder(out, B) / SNAPSHOT_AUTO_NAME)
    }
    # A read of the empty name is the base directory itself: checked like any other.
    assert as_b(out, "browser_file_upload", paths=[""]) == {"paths": [str(own_folder(out, B))]}


def test_what_is_not_a_name_is_left_to_the_workers_schema(out: Path) -> None:
    assert as_b(out, "browser_take_screenshot", filename=5) is None
    assert as_b(out, "browser_file_upload", paths={"path": "../x"}) is None
    assert confine("browser_take_screenshot", None, output_dir=out, session_id=B, workspace=None) is None
    assert as_b(out, "browser_navigate", url="file:///etc/passwd", filename="../x") is None
    assert confine(None, {"filename": "../x"}, output_dir=out, session_id=B, workspace=None) is None


def test_a_name_no_file_can_have_is_refused(out: Path) -> None:
    with pytest.raises(FileRefused, match="cannot be used"):
        as_b(out, "browser_take_screenshot", filename="a\x00b.png")


@pytest.mark.parametrize("tool", sorted({**WRITTEN, **READ}))
def test_every_tool_that_names_a_file_is_confined(out: Path, tool: str) -> None:
    key = {**WRITTEN, **READ}[tool]
    value: Any = ["../x"] if key == "paths" else "../x"
    assert names_files(tool, {key: value})
    with pytest.raises(FileRefused):
        as_b(out, tool, **{key: value})
    relative: Any = ["f.txt"] if key == "paths" else "f.txt"
    expected: Any = str(own_folder(out, B) / "f.txt")
    assert as_b(out, tool, **{key: relative}) == {key: [expected] if key == "paths" else expected}


def test_names_files_only_for_a_name_given() -> None:
    assert not names_files("browser_take_screenshot", {})
    assert not names_files("browser_take_screenshot", {"filename": None})
    assert not names_files("browser_navigate", {"url": "x"})
    assert not names_files(None, {"filename": "x"})
    assert not names_files("browser_file_upload", None)


def test_workspace_is_the_first_root_upstream_can_use() -> None:
    assert workspace_of(None) is None and workspace_of([]) is None
    assert workspace_of([{"uri": "file:///home/u/proj"}, {"uri": "file:///other"}]) == "/home/u/proj"
    assert workspace_of([{"uri": "https://example.com/"}, {"uri": "file:///b%20c"}]) == "/b c"
    assert workspace_of([{"uri": "file://host/share"}, {"uri": "file://localhost/d"}]) == "/d"
    assert workspace_of([{"uri": "file:///a%2Fb"}]) is None


def test_a_confined_call_is_reencoded_only_when_it_changes(out: Path) -> None:
    raw = b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "browser_storage_state", "arguments": {"filename": "s.json"}, "_meta": {"progressToken": 9}}}'  # noqa: E501
    message = parse(raw)
    confined = confined_call(message, output_dir=out, session_id=B, workspace=None)
    assert confined.id == 4 and confined.tool_name == "browser_storage_state"
    sent = json.loads(confined.raw)
    assert sent == confined.body and sent["params"]["_meta"] == {"progressToken": 9}
    assert sent["params"]["arguments"] == {"filename": str(own_folder(out, B) / "s.json")}
    assert confined_call(confined, output_dir=out, session_id=B, workspace=None) is confined
    untouched = parse(b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"browser_tabs","arguments":{}}}')
    assert confined_call(untouched, output_dir=out, session_id=B, workspace=None) is untouched
