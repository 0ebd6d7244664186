"""A browser that dies under a live worker ends that worker as a crash, so the session resumes.

Left alone, Playwright MCP answers the next tool call from a new browser on ``about:blank``: the
page, its session cookies and every ref the model holds are gone, and nothing says so. Treated as
the worker's crash, the next call resumes the session as after any other (the saved cookies and
tabs restored, the page re-loaded for its refs, the resume notice in the answer). A call in flight
when it died fails, its effect gone with the browser (or, if the worker had not begun to answer
it, goes to the resumed worker, as under a worker that died: endpoint.py).

The watch starts after a tool call, once Playwright has launched the browser (it does so at the
first browser tool), and again after each call until one is found. The router's own MCP session
on the worker then takes its share of that browser (one tool call): Playwright closes a shared
browser when the last session sharing it ends, and the worker ends the client's session by
itself (a ping unanswered while the client's stream was away), which would take the page with
it. No exit of the browser is asked for: ``browser_close`` cannot close a context the worker
shares between sessions (``--shared-browser-context``, workers/spec.py); Playwright refuses it.

A page that crashed while its browser lives on is dealt with the same way, once an answer shows
it (``page_crash.py``): ``page_crashed``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from router.sessions.control import ControlError
from router.sessions.page_crash import answer_reports_crash, end_for_lost_page
from workers.browser import BrowserProcess, find_browser

if TYPE_CHECKING:
    from router.sessions.continuity import Continuity
    from router.sessions.control import ControlSession
    from router.sessions.table import Session
    from router.upstream.connection import WorkerConnection

log = logging.getLogger("mcp_router.continuity")

__all__ = ["BrowserWatches"]

HOLD_TOOL: Final = "browser_tabs"
HOLD_ARGUMENTS: Final[dict[str, Any]] = {"action": "list"}


@dataclass(eq=False)
class _Watched:
    connection: WorkerConnection
    browser: BrowserProcess


class BrowserWatches:
    def __init__(
        self, *, continuity: Continuity, start_soon: Callable[[Callable[[], Awaitable[object]]], None]
    ) -> None:
        self.continuity = continuity
        self.start_soon = start_soon  # the upkeep's: its task group ends every watch at shutdown
        self._watched: dict[str, _Watched] = {}  # by session id; an entry leaves when its browser exits
        self.restarts = 0  # workers ended because their browser died

    def called(self, session: Session) -> None:
        """A tool call is over: the session's browser is watched from now on, if it has one."""
        connection = session.connection
        if connection is not None and session.page_lost_on is connection:  # its answer found the page crashed
            self.page_crashed(session, connection)
        else:
            self.watch(session)

    def watch(self, session: Session) -> None:
        """The session's browser is watched from now on, if it has one (a resume's restore
        launched it; else the first tool that needs a page does)."""
        connection = session.connection
        if connection is None:
            return
        watched = self._watched.get(session.id)
        if watched is not None and watched.connection is connection:
            return
        pid = find_browser(connection.worker.pid)
        if pid is None:
            return  # not launched yet: the first tool that needs a page does
        try:
            browser = BrowserProcess(pid)
        except OSError:
            return  # exited already: the next call looks for its successor
        watched = self._watched[session.id] = _Watched(connection, browser)  # a left worker's goes
        self.start_soon(partial(self._follow, session, watched))
        control = session.control
        # Not the client's own session (a shared browser's context): it holds its browser itself.
        own = control is not None and control.session_id == session.worker_session_id
        if control is not None and control.connection is connection and not control.shares_browser and not own:
            self.start_soon(partial(self._share, session, control))

    def page_crashed(self, session: Session, connection: WorkerConnection) -> None:
        """The session's page crashed under its live worker (``page_crash.py``): the worker is
        ended, the page put back in its saved state, and the next call resumes on it."""
        if session.connection is not connection:
            return
        session.page_lost_on = connection
        # Told twice, it is ended once: the first task detaches the worker before it awaits.
        self.start_soon(partial(end_for_lost_page, self.continuity, session))

    async def _share(self, session: Session, control: ControlSession) -> None:
        """The router's session joins the browser (a listing of the tabs changes nothing, unless
        the page crashed meanwhile: the listing finds it, and is then the only one told)."""
        with contextlib.suppress(ControlError):
            listing = await control.call(HOLD_TOOL, HOLD_ARGUMENTS)
            if answer_reports_crash(listing, control.connection.worker.output_dir):
                self.page_crashed(session, control.connection)

    async def _follow(self, session: Session, watched: _Watched) -> None:
        try:
            await watched.browser.exited()
        finally:
            watched.browser.close()
            if self._watched.get(session.id) is watched:
                del self._watched[session.id]
        connection, worker = watched.connection, watched.connection.worker
        if worker.stopping or session.connection is not connection or not worker.alive():
            return  # the session left the worker, or the whole worker is ending
        log.warning(
            "browser exited under a live worker session=%s pid=%d browser_pid=%d; restarting the worker",
            session.id, worker.pid, watched.browser.pid,
        )  # fmt: skip
        self.restarts += 1
        self.continuity.crashed(session)  # at once: a call arriving now resumes instead
        await self.continuity.end_worker(session, worker)
