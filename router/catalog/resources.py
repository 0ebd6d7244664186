"""The router's resources: what the record holds of a session, under ``playwright:///`` URIs.

Served from the record and the session's own fields, never from a worker, so a dormant session
reads them without waking one. A session sees only its own: another session's URI is "not found"
(-32002), exactly like an unknown one, so nothing tells whether it exists.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from router.catalog.paging import RESOURCE_NOT_FOUND, CatalogError
from router.catalog.session_view import SessionView
from router.record.call_view import call_images
from router.record.records import RecordNotFound
from router.record.snapshots import tool_result
from router.record.tabs_and_refs import Tab

if TYPE_CHECKING:
    from router.record.records import Records
    from router.sessions.table import Session

SCHEME: Final = "playwright:///"
JSON_MIME: Final = "application/json"
TEMPLATES: Final = (
    ("session", "{session}", "Session", "State, client, created, calls, current URL and title"),
    ("page", "{session}/{tab}", "Page", "A tab's URL, title, viewport, last change and latest snapshot"),
    ("screenshot", "{session}/{ref_id}", "Screenshot", "The image a call took", ),
    ("console", "{session}/{ref_id}", "Console", "The console entries a call recorded"),
    ("network-log", "{session}/{tab}", "Network log", "A tab's requests, from browser_network_requests"),
)
_URI = re.compile(r"^playwright:///(?P<kind>[a-z-]+)/(?P<session>[^/]+)(?:/(?P<part>[A-Za-z0-9_-]+))?$")


def uri(kind: str, session_id: str, part: str | int | None = None) -> str:
    return f"{SCHEME}{kind}/{session_id}" + ("" if part is None else f"/{part}")


@dataclass(frozen=True)
class ResourceCatalog:
    records: Callable[[], Records | None]
    files_dir: Callable[[str], Path]  # StateLayout.files_dir: the files a call kept
    viewport: str | None = None  # the router's --viewport; None: the worker's default

    @staticmethod
    def templates() -> list[dict[str, Any]]:
        return [
            {
                "uriTemplate": f"{SCHEME}{kind}/{pattern}", "name": kind, "title": title,
                "description": description, "mimeType": "image/png" if kind == "screenshot" else JSON_MIME,
            }
            for kind, pattern, title, description in TEMPLATES
        ]

    async def list(self, session: Session) -> list[dict[str, Any]]:
        view = await SessionView.load(self.records(), session.id)
        sid = session.id
        listed = [_entry(uri("session", sid), "session", "This browser session", JSON_MIME)]
        for tab in view.tabs():
            listed.append(_entry(uri("page", sid, tab.index), f"page-{tab.index}", tab.title or tab.url, JSON_MIME))
        for index in sorted(view.network_logs()):
            listed.append(_entry(uri("network-log", sid, index), f"network-log-{index}", f"Requests of tab {index}",
                                 JSON_MIME))
        for ref in view.screenshot_refs():
            listed.append(
                _entry(uri("screenshot", sid, ref), f"screenshot-{ref[:8]}", f"Screenshot {ref}", "image/png")
            )
        for ref in view.console_refs():
            listed.append(_entry(uri("console", sid, ref), f"console-{ref[:8]}", f"Console of {ref}", JSON_MIME))
        return listed

    def owned(self, session: Session, address: str) -> tuple[str, str | None]:
        """(kind, part) of one of this session's URIs; CatalogError -32002 for anything else."""
        match = _URI.match(address)
        if match is None or match.group("session") != session.id:
            raise _not_found(address)
        kind, part = match.group("kind"), match.group("part")
        if (kind == "session") != (part is None) or kind not in {t[0] for t in TEMPLATES}:
            raise _not_found(address)
        return kind, part

    async def read(self, session: Session, address: str) -> dict[str, Any]:
        kind, part = self.owned(session, address)
        records = self.records()
        view = await SessionView.load(records, session.id)
        if kind == "session":
            return _json(address, self._session(session, view))
        if kind in ("page", "network-log"):
            index = int(part) if part is not None and part.isdigit() else -1
            if kind == "page":
                tab = view.tab(index)
                if tab is None:
                    raise _not_found(address)
                return _json(address, self._page(session, view, tab))
            log = view.network_logs().get(index)
            if log is None:
                raise _not_found(address)
            lines = [line for line in log.facts.sections.get("Result", "").split("\n") if line.strip()]
            return _json(address, {"session": session.id, "tab": index, "ref_id": log.ref_id, "ts": log.ts,
                                   "requests": lines})
        assert part is not None
        if records is None or not view.owns(part):
            raise _not_found(address)
        if kind == "console":
            try:
                call = await records.get_call(part, session_id=session.id)
            except RecordNotFound:
                raise _not_found(address) from None
            return _json(address, {"session": session.id, "ref_id": part, "tool": call["tool"],
                                   "ts": call["ts"], "entries": call["console"]})
        return await self._screenshot(records, session, address, part)

    def _session(self, session: Session, view: SessionView) -> dict[str, Any]:
        current = view.current()
        return {
            "session": session.id, "state": session.state.value, "client": session.client_info,
            "created": session.created, "calls": view.tool_calls,
            "url": current.url if current is not None else session.current_url,
            "title": current.title if current is not None else None,
            "tabs": len(view.tabs()),
        }

    def _page(self, session: Session, view: SessionView, tab: Tab) -> dict[str, Any]:
        changed = view.last_change(tab)
        snapshot = view.snapshot(tab)
        return {
            "session": session.id, "tab": tab.index, "current": tab.current, "url": tab.url, "title": tab.title,
            "viewport": self.viewport,
            "last_change": None if changed is None else {"ref_id": changed.ref_id, "tool": changed.tool,
                                                           "ts": changed.ts},
            "snapshot_ref": None if snapshot is None else snapshot.ref_id,
            "snapshot": None if snapshot is None else snapshot.page_snapshot,
        }

    async def _screenshot(self, records: Records, session: Session, address: str, ref: str) -> dict[str, Any]:
        try:
            call = await records.get_call(ref, session_id=session.id)
            kept = await records.call_files(ref)
        except RecordNotFound:
            raise _not_found(address) from None
        for image in call_images(tool_result(call["result"]), None, kept=kept, files_dir=self.files_dir(ref)):
            data = image.read()
            if data is not None:
                return {"contents": [{"uri": address, "mimeType": image.mime,
                                      "blob": base64.b64encode(data).decode()}]}
        raise _not_found(address)


def _entry(address: str, name: str, title: str, mime: str) -> dict[str, Any]:
    return {"uri": address, "name": name, "title": title, "mimeType": mime}


def _json(address: str, value: Any) -> dict[str, Any]:
    return {"contents": [{"uri": address, "mimeType": JSON_MIME, "text": json.dumps(value, ensure_ascii=False)}]}


def _not_found(address: str) -> CatalogError:
    return CatalogError(RESOURCE_NOT_FOUND, "Resource not found", {"uri": address})
