"""Tools the router adds to every session and answers itself, and compact answers.

The worker never sees these calls. Their answers come from the record (SQLite), so they work
for any call of this conversation, even after its worker was reaped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from router.record import snapshots
from router.record.records import RecordError
from router.types import REF_META_KEY

if TYPE_CHECKING:
    from router.record.records import Records

GET_CONTENT: Final = "get_content"
GET_CONSOLE: Final = "get_console_content"
CREATE_NEW_SESSION: Final = "create_new_session"
# Answers that compact mode leaves whole: the snapshot is what was asked for.
KEEP_WHOLE: Final = frozenset({"browser_snapshot"})

_REF = {"type": "string", "description": "The ref_id of an earlier call (shown in compact answers)."}
DEFINITIONS: Final[list[dict[str, Any]]] = [
    {
        "name": GET_CONTENT,
        "description": (
            "Read the page snapshot (accessibility tree, YAML) recorded for an earlier browser call. "
            "The first read of a ref_id returns it whole; later reads of the same ref_id return only what "
            "changed since the last read (empty when nothing did). since_ref returns a line diff against "
            "another call's snapshot; search_for keeps matching lines and their ancestors."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "ref_id": _REF,
                "search_for": {"type": "string", "description": "Keep only lines containing this text."},
                "since_ref": {"type": "string", "description": "Diff against this earlier call's snapshot."},
                "reset_cursor": {"type": "boolean", "description": "Return the whole snapshot again."},
            },
            "required": ["ref_id"],
        },
    },
    {
        "name": GET_CONSOLE,
        "description": "Console messages recorded for an earlier browser call, one per line.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "ref_id": _REF,
                "level": {
                    "type": "string",
                    "enum": ["", "debug", "info", "warn", "error"],
                    "description": "Minimum level; empty for all.",
                },
            },
            "required": ["ref_id"],
        },
    },
    {
        "name": CREATE_NEW_SESSION,
        "description": (
            "Give this conversation a fresh browser: a new browser process with empty cookies and storage. "
            "Returns the new browser-session id."
        ),
        "inputSchema": {"type": "object", "properties": {}},
    },
]
NAMES: Final = frozenset(d["name"] for d in DEFINITIONS)

RenewBrowser = Callable[[], Awaitable[str]]


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


async def call(
    name: str, arguments: dict[str, Any], *, records: Records | None, session_id: str, renew: RenewBrowser
) -> dict[str, Any]:
    """The result of one router tool; failures are tool errors, never JSON-RPC errors."""
    try:
        if name == CREATE_NEW_SESSION:
            return text_result(f"New browser session: {await renew()}")
        if records is None:
            return text_result("Recording is off in this router (--no-record): nothing to read.", is_error=True)
        ref_id = arguments.get("ref_id")
        if not isinstance(ref_id, str) or not ref_id:
            return text_result("ref_id is required", is_error=True)
        if name == GET_CONTENT:
            text = await records.read_content(
                session_id,
                ref_id,
                search_for=_opt_str(arguments.get("search_for")),
                since_ref=_opt_str(arguments.get("since_ref")),
                reset_cursor=bool(arguments.get("reset_cursor", False)),
            )
            return text_result(text)
        return text_result(await records.read_console(session_id, ref_id, _opt_str(arguments.get("level"))))
    except (RecordError, ValueError) as exc:
        return text_result(str(exc) or type(exc).__name__, is_error=True)


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def with_router_tools(result: Any) -> Any:
    """A tools/list result with the router's tools appended (on the last page only)."""
    if isinstance(result, dict) and isinstance(result.get("tools"), list) and not result.get("nextCursor"):
        names = {t.get("name") for t in result["tools"] if isinstance(t, dict)}
        result["tools"].extend(d for d in DEFINITIONS if d["name"] not in names)
    return result


def compact(result: Any, extracted: snapshots.Extracted, *, ref_id: str, tool: str | None) -> Any:
    """Compact mode: a successful, image-free tool answer (``extracted``: its summary) becomes a
    short metadata block."""
    if not isinstance(result, dict) or tool in KEEP_WHOLE or tool in NAMES:
        return result
    if extracted.is_error or extracted.has_image:
        return result
    summary = snapshots.compact_summary(ref_id, tool or "?", extracted)
    compacted = {"content": [{"type": "text", "text": summary}]}
    if "_meta" in result:
        compacted["_meta"] = result["_meta"]
    return compacted


def with_ref_meta(result: dict[str, Any], ref_id: str) -> dict[str, Any]:
    """``result`` (a tool's, parsed) with ``_meta.refId`` set, wherever its ``_meta`` sits and
    whatever else it holds (kept); a copy, the worker's answer as parsed left as it was."""
    meta = result.get("_meta")
    return {**result, "_meta": {**(meta if isinstance(meta, dict) else {}), REF_META_KEY: ref_id}}
