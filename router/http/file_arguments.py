"""File names in tool calls, kept to the calling session's own folder on a shared worker.

Sessions that share a worker (``--sessions-per-browser``, router/sessions/hosts.py) share its one
``--output-dir``, which is also the working directory of a session whose client declared no roots.
@playwright/mcp 0.0.83 resolves every file name a call gives, read or written, against the call's
``_meta.cwd`` or the session's workspace (the client's first root, else the worker's working
directory), and only checks that the real path lies inside the output dir or that workspace
(coreBundle.js ``workspaceFile``, ``checkFile``): so one session could read another's saved
storage state (its cookies) or overwrite its screenshot. Here each session gets a folder of its
own in the output dir, named by a hash of its id (a bearer secret, never shown), and

- a relative name is resolved as upstream does, except that the worker's working directory is,
  for this session, its own folder;
- a name whose real path (symlinks followed) lies in the output dir but outside the own folder,
  or holds the output dir (a directory upload of a parent), is refused;
- every name is sent absolute, so the worker finds exactly the file that was checked; a name
  outside the output dir is the client's own workspace, which upstream checks.

Files the worker names itself (no name given) still land in the output dir's root; with names
kept to own folders, no session can read them back. The router's own save and restore files
(router/sessions/statefiles.py) are written by calls of the router's, which do not come here.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from router.layout import own_folder
from router.protocol.messages import ClientMessage
from router.record.worker_answer import encode
from router.types import JsonObject

# Every argument of @playwright/mcp 0.0.83 that names a file (coreBundle.js: the callers of
# ``resolveClientFilename``, directly or through ``resolveClientOutputFile``).
WRITTEN: Final = {
    "browser_snapshot": "filename",
    "browser_take_screenshot": "filename",
    "browser_pdf_save": "filename",
    "browser_storage_state": "filename",
    "browser_console_messages": "filename",
    "browser_network_requests": "filename",
    "browser_network_request": "filename",
    "browser_evaluate": "filename",
    "browser_find": "filename",
    "browser_start_video": "filename",
}
READ: Final = {
    "browser_set_storage_state": "filename",
    "browser_file_upload": "paths",
    "browser_drop": "paths",
    "browser_run_code_unsafe": "filename",
}
# A written name that means "no name" to the worker (it picks one in the output dir's root): the
# empty one, and browser_snapshot's own marker.
SNAPSHOT_AUTO_NAME: Final = "<auto>"
META_CWD: Final = "cwd"  # arguments._meta.cwd: the call's own directory for relative names


class FileRefused(ValueError):
    """A file argument reaches past the session's own folder; the message says which and why."""


def workspace_of(roots: list[dict[str, Any]] | None) -> str | None:
    """The client's first root as a path, as @playwright/mcp takes it (``firstRootPath``: the
    first ``file:`` URI it can turn into a path); None when there is none or they are unknown."""
    for root in roots or ():
        parts = urlsplit(str(root.get("uri", "")))
        if parts.scheme != "file" or parts.netloc not in ("", "localhost") or "%2f" in parts.path.lower():
            continue  # Node's fileURLToPath refuses these on POSIX; upstream skips the root
        if parts.path:
            return unquote(parts.path)
    return None


def names_files(tool: str | None, arguments: Any) -> bool:
    """Whether the call gives a file argument this module looks at."""
    key = WRITTEN.get(tool or "") or READ.get(tool or "")
    return key is not None and isinstance(arguments, dict) and arguments.get(key) is not None


def confined_call(message: ClientMessage, *, output_dir: Path, session_id: str, workspace: str | None) -> ClientMessage:
    """The tools/call ``message`` as it is to be sent and recorded (``confine``): itself when
    nothing changes, so its bytes go as they came."""
    arguments = confine(
        message.tool_name, message.params.get("arguments"), output_dir=output_dir, session_id=session_id,
        workspace=workspace,
    )  # fmt: skip
    if arguments is None:
        return message
    body = {**message.body, "params": {**message.params, "arguments": arguments}}
    return ClientMessage(message.kind, body, encode(body))


def confine(
    tool: str | None, arguments: Any, *, output_dir: Path, session_id: str, workspace: str | None
) -> JsonObject | None:
    """The call's ``arguments`` with its file names made absolute, or None when they need no
    change (or it has none). ``workspace``: the client's first root (``workspace_of``), None for
    the worker's working directory. Raises FileRefused for a name outside the own folder but
    inside the output dir. Reads the file system (real paths), nothing else."""
    written, read = WRITTEN.get(tool or ""), READ.get(tool or "")
    key = written or read
    if key is None or not isinstance(arguments, dict) or arguments.get(key) is None:
        return None
    value = arguments[key]
    output = Path(os.path.realpath(output_dir))
    own = own_folder(output_dir, session_id)
    base = _resolve(str(own), _call_directory(arguments, workspace) or str(own))
    if isinstance(value, str):
        if written is not None and (value == "" or (tool == "browser_snapshot" and value == SNAPSHOT_AUTO_NAME)):
            return None
        kept: Any = _confined(value, base, output, own)
    elif isinstance(value, list):
        kept = [_confined(v, base, output, own) if isinstance(v, str) else v for v in value]
    else:
        return None  # not a name: the worker's schema refuses it
    return None if kept == value else {**arguments, key: kept}


def _call_directory(arguments: JsonObject, workspace: str | None) -> str | None:
    """The directory upstream resolves this call's relative names against, as the client gave it."""
    meta = arguments.get("_meta")
    cwd = meta.get(META_CWD) if isinstance(meta, dict) else None
    if cwd is None:
        return workspace
    if not isinstance(cwd, str):
        raise FileRefused(f"_meta.{META_CWD} must be a string")
    return cwd


def _confined(name: str, base: str, output: Path, own: Path) -> str:
    """``name`` absolute, once its real path is found to be the session's to touch."""
    target = _resolve(base, name)
    try:
        real = Path(os.path.realpath(target))
        own_real = Path(os.path.realpath(own))
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long: no file to look at
        raise FileRefused(f"File {name!r} cannot be used: {exc}") from None
    if real.is_relative_to(own_real):
        return target
    if real.is_relative_to(output) or output.is_relative_to(real):
        raise FileRefused(
            f"File {name!r} is outside this session's own folder {own} of the browser worker's output "
            "directory, which other sessions share; use a name inside that folder"
        )
    return target


def _resolve(base: str, name: str) -> str:
    """``name`` as Node's ``path.resolve(base, name)`` makes it: absolute, with ``.`` and ``..``
    folded by the text alone (the worker opens exactly this path; no symlink is looked at)."""
    joined = posixpath.normpath(posixpath.join(base, name))
    return "/" + joined.lstrip("/") if joined.startswith("//") else joined
