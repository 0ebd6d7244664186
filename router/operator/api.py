"""Read-only JSON API under /api/ (sessions, their calls, one call), plus two operator actions.

Reads merge the live state held by the SessionManager with the record (router.record.records). The
actions (end, hibernate) change state, so they are guarded against cross-site requests on top of
the Origin/Host middleware that wraps the whole app: they need a custom header, which a page on
another origin can only send after a CORS preflight that this router never grants, and a
same-origin Origin when the browser sends one (a page on another loopback port passes the
middleware's loopback rule but not this one).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import quote, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from router.errors import RouterError
from router.layout import StateLayout
from router.operator.memory import MemorySampler
from router.record.call_view import call_images, fill_from_answer
from router.record.files import IMAGE_MIMES, KeptFile, read_kept
from router.record.records import RecordNotFound, Records, client_name
from router.record.snapshots import tool_result
from router.sessions.manager import SessionManager
from router.sessions.table import ENDED, Session, State
from router.sessions.thumbnail import page_picture
from router.types import ACTION_HEADER

log = logging.getLogger("mcp_router.api")

DEFAULT_LIMIT: Final = 200
MAX_LIMIT: Final = 1000
_SAFE_FETCH_SITES: Final = frozenset({"same-origin", "none"})
# The bytes came from a browser-driven process: never let them run as a document.
FILE_HEADERS: Final = {
    "x-content-type-options": "nosniff", "content-security-policy": "default-src 'none'",
    "cache-control": "private, max-age=3600",
}


class _Json(JSONResponse):
    """Starlette's JSON answer, except that text which is not Unicode (a lone surrogate in a
    session's client info or a page's text) goes out escaped instead of failing the answer."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:  # the rare case pays the second encoding
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


def _error(status: int, message: str) -> JSONResponse:
    return _Json({"error": message}, status_code=status)


def cross_site_refusal(request: Request) -> str | None:
    """Why an action request must be refused, or None. Pure; the tests call it too."""
    if request.headers.get(ACTION_HEADER) != "1":
        return f"missing {ACTION_HEADER} header"
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in _SAFE_FETCH_SITES:
        return f"cross-site request (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        parts = urlsplit(origin.strip().lower())
        if parts.netloc != host.strip().lower() or parts.scheme not in ("http", "https"):
            return f"Origin {origin!r} is not this router ({host!r})"
    return None


# What a session's row shows from the record; a live session's state overrides some.
RECORDED_KEYS: Final = (
    "id", "state", "client", "created", "last_activity", "calls", "errors", "requests", "parent_id",
    "protocol_version", "last_resume", "conversation",
)  # fmt: skip


class Api:
    def __init__(
        self,
        manager: SessionManager,
        records: Callable[[], Records | None],
        layout: StateLayout,
        memory: MemorySampler | None = None,
    ) -> None:
        """``manager`` for the live sessions and the actions on them; ``records()`` for everything
        the record holds (None when recording is off or the recorder is not running)."""
        self.manager = manager
        self._records = records
        self.layout = layout
        self.memory = memory or MemorySampler()

    def routes(self) -> list[Route]:
        return [
            Route("/api/sessions", self.sessions, methods=["GET"]),
            Route("/api/sessions/{session_id}", self.session, methods=["GET"]),
            Route("/api/sessions/{session_id}/picture", self.picture, methods=["GET"]),
            Route("/api/sessions/{session_id}/end", self.end, methods=["POST"]),
            Route("/api/sessions/{session_id}/hibernate", self.hibernate, methods=["POST"]),
            Route("/api/calls/{ref_id}", self.call, methods=["GET"]),
            Route("/api/calls/{ref_id}/images/{n:int}", self.image, methods=["GET"]),
            Route("/api/calls/{ref_id}/files/{name}", self.file, methods=["GET"]),
        ]

    # ---------------------------------------------------------------- helpers

    @property
    def records(self) -> Records | None:
        return self._records()

    async def _memory(self, sessions: list[Session]) -> dict[str, int]:
        """PSS by worker id: each session's worker, a host once however many sessions it carries."""
        roots = {
            s.connection.worker.session_id: s.connection.worker.pid
            for s in sessions
            if s.connection is not None and s.connection.worker.alive()
        }
        hosts = self.manager.hosts
        roots |= {h.id: h.worker.pid for h in (hosts.all() if hosts is not None else [])}
        return await self.memory.sample(roots)

    def _row(self, record: dict[str, Any] | None, live: Session | None, memory: dict[str, int]) -> dict[str, Any]:
        """One session as the API shows it: the live state when the router holds it, else the record's."""
        rec = record or {}
        row: dict[str, Any] = {key: rec.get(key) for key in RECORDED_KEYS}
        row.update(
            live=False, worker_pid=None, worker_port=None, memory_bytes=None, in_flight=0, idle_seconds=None,
            url=None, title=None, host=None,
        )  # fmt: skip
        if live is None:
            return row
        worker = live.connection.worker if live.connection is not None else None
        row.update(
            id=live.id,
            state=live.state.value,
            live=live.state not in ENDED,
            client=client_name(live.client_info) or rec.get("client"),
            created=rec.get("created") or live.created,
            last_activity=max(live.last_activity, rec.get("last_activity") or 0.0),
            protocol_version=live.protocol_version or rec.get("protocol_version"),
            in_flight=live.in_flight,
            conversation=live.conversation or rec.get("conversation"),
            url=live.current_url,
            title=live.current_title,
            idle_seconds=round(live.idle_for(time.monotonic()), 1),
        )
        if worker is not None and worker.alive():
            row.update(worker_pid=worker.pid, worker_port=worker.port)
            if self.manager.continuity.shares(worker):  # its memory is the host's, in "hosts"
                row.update(host=worker.session_id)
            else:
                row.update(memory_bytes=memory.get(worker.session_id))
        return row

    # ---------------------------------------------------------------- reads

    async def sessions(self, request: Request) -> Response:
        try:
            limit = min(int(request.query_params.get("limit", DEFAULT_LIMIT)), MAX_LIMIT)
        except ValueError:
            return _error(400, "limit must be an integer")
        live = {s.id: s for s in self.manager.sessions}
        memory = await self._memory(list(live.values()))
        records = self.records
        recorded = await records.list_sessions(limit=limit) if records is not None else []
        rows = [self._row(r, live.pop(r["id"], None), memory) for r in recorded]
        # Live sessions the record does not show (recording off, or beyond the limit) come first.
        extra = [self._row(None, s, memory) for s in sorted(live.values(), key=lambda s: -s.created)]
        now = self.manager.stats()
        return _Json({
            "sessions": extra + rows, "recording": records is not None, "now": time.time(),
            "node": self.manager.node_id,  # behind a balancer: whose sessions these are (--node-id)
            # Warm workers held for resumes: no session's, so in no row.
            "reserve": {"workers": now.reserve_workers, "max": now.resume_reserve},
            # Workers several sessions share (--sessions-per-browser): a row's "host" is one of them.
            "hosts": hosts.describe(memory) if (hosts := self.manager.hosts) is not None else None,
            "sessions_per_browser": now.sessions_per_browser,
        })

    async def session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        live = self.manager.sessions.get(session_id)
        records = self.records
        record: dict[str, Any] | None = None
        calls: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        if records is not None:
            try:
                full = await records.get_session(session_id)
            except RecordNotFound:
                full = None
            if full is not None:
                calls = await records.session_calls(session_id)
                record = {
                    **full,
                    "client": client_name(full.get("client_info")),
                    "requests": len(calls),
                    "calls": sum(1 for c in calls if c["method"] == "tools/call"),
                    "errors": sum(1 for c in calls if c["status"] == "error"),
                }
                events = await records.session_events(session_id)
                resumes = [e["detail"] for e in events if e["kind"] == "resumed"]
                record["last_resume"] = resumes[-1] if resumes else None
        if record is None and live is None:
            return _error(404, f"unknown session {session_id}")
        memory = await self._memory([live]) if live is not None else {}
        return _Json({"session": self._row(record, live, memory), "calls": calls, "events": events})

    async def picture(self, request: Request) -> Response:
        """The live session's page as a JPEG, taken now (sessions/thumbnail.py) and not kept; 204
        when it has no browser open to take it from."""
        session_id = request.path_params["session_id"]
        live = self.manager.sessions.get(session_id)
        if live is None:
            return _error(404, f"no live session {session_id}")
        taken = await page_picture(live)
        if taken is None:  # asleep, never browsed, or its page did not paint in time: no picture now
            return Response(status_code=204, headers={"cache-control": "no-store"})
        data, mime = taken
        return Response(data, media_type=mime, headers={**FILE_HEADERS, "cache-control": "no-store"})

    async def call(self, request: Request) -> Response:
        ref_id = request.path_params["ref_id"]
        found = await self._call(ref_id)
        if isinstance(found, Response):
            return found
        call, images = found
        call["images"] = [
            {"n": n, "url": f"/api/calls/{ref_id}/images/{n}", "mime": img.mime, "source": img.source,
             "name": img.name}
            for n, img in enumerate(images)
        ]
        for f in call["files"]:
            f["url"] = f"/api/calls/{ref_id}/files/{quote(f['name'])}"
        return _Json({"call": call})

    async def _call(self, ref_id: str) -> tuple[dict[str, Any], list[Any]] | Response:
        records = self.records
        if records is None:
            return _error(503, "the record is not available (recording is off)")
        try:
            call = await records.get_call(ref_id)
        except RecordNotFound:
            return _error(404, f"unknown call {ref_id}")
        result = tool_result(call.get("result"))
        out_dir = self.layout.output_dir(str(call["session_id"]))
        fill_from_answer(call, result, out_dir)
        kept = [KeptFile(**f) for f in call["files"]]
        return call, call_images(result, out_dir, kept=kept, files_dir=self.layout.files_dir(ref_id))

    async def image(self, request: Request) -> Response:
        found = await self._call(request.path_params["ref_id"])
        if isinstance(found, Response):
            return found
        _, images = found
        n = request.path_params["n"]
        if not 0 <= n < len(images):
            return _error(404, "no such image")
        data = images[n].read()
        if data is None:
            return _error(404, "the image file is gone (its session's files were removed)")
        return Response(data, media_type=images[n].mime, headers=FILE_HEADERS)

    async def file(self, request: Request) -> Response:
        """A file the recorder kept for the call. Only names the record lists are served."""
        ref_id, name = request.path_params["ref_id"], request.path_params["name"]
        found = await self._call(ref_id)
        if isinstance(found, Response):
            return found
        call, _ = found
        listed = next((f for f in call["files"] if f["name"] == name), None)
        if listed is None:
            return _error(404, "no such file")
        data = read_kept(self.layout.files_dir(ref_id), name)
        if data is None:
            return _error(404, "the file is gone")
        disposition = "inline" if listed["mime"] in IMAGE_MIMES.values() else "attachment"
        return Response(data, media_type=listed["mime"],
                        headers={**FILE_HEADERS, "content-disposition": f'{disposition}; filename="{name}"'})

    # ---------------------------------------------------------------- actions

    async def _action(self, request: Request, name: str, act: Callable[[Session], Awaitable[bool]]) -> Response:
        refusal = cross_site_refusal(request)
        if refusal is not None:
            return _error(403, refusal)
        session_id = request.path_params["session_id"]
        try:
            # Also finds a dormant session a previous run of the router left on disk.
            session = await self.manager.lookup(session_id)
        except RouterError:
            return _error(404, f"no live session {session_id}")
        log.info("api: %s session=%s", name, session_id, extra={"session": session_id, "event": f"api_{name}"})
        if not await act(session):
            return _error(409, f"cannot {name} session {session_id} now (state {session.state.value}, "
                               f"{session.in_flight} call(s) in flight)")
        return _Json({"id": session_id, "state": session.state.value})

    async def end(self, request: Request) -> Response:
        async def end(session: Session) -> bool:
            await self.manager.end(session, State.CLOSED)
            return True

        return await self._action(request, "end", end)

    async def hibernate(self, request: Request) -> Response:
        return await self._action(request, "hibernate", self.manager.hibernate)
