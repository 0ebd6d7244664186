"""What `BrowserSession` returns: pydantic models read from the worker's answers.

@playwright/mcp 0.0.83 answers with one text part made of ``### `` sections (Page, Snapshot,
Result, Open tabs, Events...; see `router.record.snapshots`, which reads them for the recorder
too); the router adds the call's record id as ``_meta["mcp-router/refId"]``. Every model keeps
the whole answer text (``text``) and its sections, so nothing the worker said is lost.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from router.record import snapshots, tabs_and_refs
from router.types import REF_META_KEY

# "[ref=e3]" on the main page, "[ref=f1e3]" in a later navigation or a frame.
_REF = re.compile(r"\[ref=((?:f\d+)?e\d+)\]")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ToolResult(_Frozen):
    """Any tool's answer. ``ref_id`` is the router's record id for this call (pass it to
    `BrowserSession.content`); ``url`` and ``title`` are the page's after the call, when the
    answer names them."""

    tool: str
    ref_id: str | None = None
    text: str = ""
    sections: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    title: str | None = None

    @classmethod
    def from_result(cls, tool: str, result: Mapping[str, Any], **extra: Any) -> Self:
        """The model for one tools/call result (the JSON object, ``content`` and ``_meta``)."""
        return cls.model_validate({**cls._fields_of(tool, result, snapshots.summarize(result)), **extra})

    @classmethod
    def _fields_of(cls, tool: str, result: Mapping[str, Any], facts: snapshots.Extracted) -> dict[str, Any]:
        return {
            "tool": tool,
            "ref_id": ref_id_of(result),
            "text": snapshots.answer_text(result),
            "sections": facts.sections,
            "url": facts.page_url,
            "title": facts.page_title,
        }


class PageResult(ToolResult):
    """An action's answer (click, fill_form): the page after it and its console counts."""

    console_errors: int | None = None
    console_warnings: int | None = None

    @classmethod
    def _fields_of(cls, tool: str, result: Mapping[str, Any], facts: snapshots.Extracted) -> dict[str, Any]:
        return {
            **super()._fields_of(tool, result, facts),
            "console_errors": facts.console_errors,
            "console_warnings": facts.console_warnings,
        }


class NavigateResult(PageResult):
    """browser_navigate's answer."""


class Snapshot(ToolResult):
    """The page's accessibility tree (YAML), with the element refs actions take as ``target``."""

    snapshot: str = ""

    @classmethod
    def _fields_of(cls, tool: str, result: Mapping[str, Any], facts: snapshots.Extracted) -> dict[str, Any]:
        fields = super()._fields_of(tool, result, facts)
        return {**fields, "snapshot": facts.page_snapshot or fields["sections"].get("Snapshot", "").strip()}

    def ref(self, label: str) -> str:
        """The ref (``e3``, ``f1e3``) on the first snapshot line mentioning ``label``."""
        for line in self.snapshot.splitlines():
            if label in line and (match := _REF.search(line)):
                return match.group(1)
        raise LookupError(f"no element mentioning {label!r} in the snapshot of {self.url or 'the page'}")


class Screenshot(ToolResult):
    """browser_take_screenshot's image, decoded."""

    data: bytes = b""
    mime_type: str = ""

    @classmethod
    def _fields_of(cls, tool: str, result: Mapping[str, Any], facts: snapshots.Extracted) -> dict[str, Any]:
        fields = super()._fields_of(tool, result, facts)
        for part in result.get("content") or []:
            if isinstance(part, Mapping) and part.get("type") == "image":
                try:
                    data = base64.b64decode(str(part.get("data", "")), validate=True)
                except (binascii.Error, ValueError):
                    continue
                return {**fields, "data": data, "mime_type": str(part.get("mimeType", ""))}
        return fields


class EvaluateResult(ToolResult):
    """browser_evaluate's answer: ``result`` is the value as the worker printed it (JSON)."""

    result: str = ""

    @classmethod
    def _fields_of(cls, tool: str, result: Mapping[str, Any], facts: snapshots.Extracted) -> dict[str, Any]:
        fields = super()._fields_of(tool, result, facts)
        return {**fields, "result": fields["sections"].get("Result", "").strip()}

    @property
    def value(self) -> Any:
        """The value parsed as JSON; the printed text when it is not JSON (``undefined``)."""
        try:
            return json.loads(self.result)
        except ValueError:
            return self.result


class ConsoleEntry(_Frozen):
    level: Literal["debug", "info", "warn", "error"]
    message: str
    url: str | None = None
    line: int | None = None


class ConsoleMessages(ToolResult):
    """browser_console_messages' entries, oldest first."""

    entries: list[ConsoleEntry] = Field(default_factory=list)

    @classmethod
    def _fields_of(cls, tool: str, result: Mapping[str, Any], facts: snapshots.Extracted) -> dict[str, Any]:
        entries = [
            {"level": e["level"], "message": e["message"], **(e["location"] or {})}
            for e in snapshots.normalize_console(facts.console_lines)
        ]
        return {**super()._fields_of(tool, result, facts), "entries": entries}

    @property
    def messages(self) -> list[str]:
        return [e.message for e in self.entries]


class Tab(_Frozen):
    index: int
    url: str
    title: str
    current: bool


class Tabs(ToolResult):
    """browser_tabs' list of open tabs, by index."""

    tabs: list[Tab] = Field(default_factory=list)

    @classmethod
    def _fields_of(cls, tool: str, result: Mapping[str, Any], facts: snapshots.Extracted) -> dict[str, Any]:
        fields = super()._fields_of(tool, result, facts)
        listed = fields["sections"].get("Result") or fields["sections"].get("Open tabs", "")
        return {**fields, "tabs": [vars(tab) for tab in tabs_and_refs.tab_entries(listed)]}

    @property
    def current(self) -> Tab | None:
        return next((tab for tab in self.tabs if tab.current), None)


class Content(ToolResult):
    """get_content's answer about an earlier call (``source_ref``): the snapshot recorded for it,
    or what changed since the last read; ``text`` is that content."""

    source_ref: str


class FormField(_Frozen):
    """One field for `BrowserSession.fill_form` (browser_fill_form's item schema)."""

    name: str
    target: str = Field(min_length=1)
    type: Literal["textbox", "checkbox", "radio", "combobox", "slider"]
    value: str | bool
    element: str | None = None

    def argument(self) -> dict[str, Any]:
        value = ("true" if self.value else "false") if isinstance(self.value, bool) else self.value
        return {**self.model_dump(exclude_none=True), "value": value}


def ref_id_of(result: Mapping[str, Any]) -> str | None:
    meta = result.get("_meta")
    ref = meta.get(REF_META_KEY) if isinstance(meta, Mapping) else None
    return ref if isinstance(ref, str) else None
