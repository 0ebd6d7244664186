"""`mcp-router sessions | show ID | show --conversation KEY | export ID`: the record, read without a
running router."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from router.cli import tables
from router.errors import BadRequest
from router.layout import StateLayout
from router.record.records import RecordNotFound, Records
from router.router_file import running_router
from router.settings import Settings

if TYPE_CHECKING:
    from router.api_client import LiveView

MAX_CONVERSATION_SESSIONS: Final = 1000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sessions", help="list recorded sessions")
    p.add_argument("--state-dir")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--end", metavar="ID", help="end a session for good (its browser profile is deleted)")
    p.add_argument("--nodes", metavar="URL,URL", help="a cluster's nodes: each one's live sessions, read from its /api")
    p.set_defaults(func=_sessions)
    p = sub.add_parser("show", help="a session's timeline of calls (or a conversation's sessions)")
    p.add_argument("session_id", nargs="?")
    p.add_argument("--conversation", metavar="KEY",
                   help="every session of the conversation with this key (e.g. a CLAUDE_CODE_SESSION_ID), oldest first")
    p.add_argument("--state-dir")
    p.set_defaults(func=_show)
    p = sub.add_parser("export", help="a session and its calls as JSON lines")
    p.add_argument("session_id")
    p.add_argument("--state-dir")
    p.set_defaults(func=_export)


def layout(args: argparse.Namespace) -> StateLayout:
    return StateLayout(Path(args.state_dir) if args.state_dir else Settings().state_dir)


def db_path(args: argparse.Namespace) -> Path:
    return layout(args).db


def _run(args: argparse.Namespace, job: str) -> int:
    path = db_path(args)
    if not path.exists():
        print(f"no record yet at {path} (start the router first, or pass --state-dir)", file=sys.stderr)
        return 1
    try:
        return asyncio.run(_job(layout(args), args, job))
    except RecordNotFound as exc:
        print(f"not found: {exc}", file=sys.stderr)
        return 1


async def _job(state: StateLayout, args: argparse.Namespace, job: str) -> int:
    async with Records.open(state.db, readonly=True) as records:
        if job == "sessions":
            print(tables.format_sessions_table(await records.list_sessions(limit=args.limit)))
        elif job == "show":
            key = args.conversation
            ids = [args.session_id] if args.session_id else await _conversation_sessions(records, state, key)
            for i, session_id in enumerate(ids):
                session = await records.get_session(session_id)
                print(f"{chr(10) if i else ''}session {session['id']}  state={session['state']}"
                      f"  created={tables.format_ts(session['created'])}")
                calls = await records.session_calls(session_id)
                events = await records.session_events(session_id)
                print(tables.format_timeline(calls, events=events, files_dir=state.files_dir))
        else:
            async for line in records.export_session(args.session_id):
                sys.stdout.write(line + "\n")
    return 0


async def _conversation_sessions(records: Records, state: StateLayout, key: str) -> list[str]:
    """The conversation's sessions, oldest first: the key hashed under this state dir's token (as a
    client showing the token sent it) and without one (--auth none)."""
    from router.cli import admin
    from router.http.auth import OPEN_SCOPE, conversation_scope
    from router.sessions.conversations import conversation_id

    scopes = {conversation_scope(admin.state_dir_token(state.root)), OPEN_SCOPE}
    found = await records.list_sessions(limit=MAX_CONVERSATION_SESSIONS, conversations=[
        conversation_id(scope, key) for scope in scopes
    ])  # fmt: skip
    if not found:
        raise RecordNotFound(f"no session of conversation {key!r} in the record")
    return [row["id"] for row in reversed(found)]


def _sessions(args: argparse.Namespace) -> int:
    if args.end:
        from router.cli import admin

        ok, message = admin.end_session(layout(args).root, args.end)
        print(message, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    if args.nodes:
        from router.cli.cluster import show_cluster

        return show_cluster(args.nodes, layout(args).root, args.limit)
    live = _live_view(layout(args).root)
    if live is not None:
        # A running router knows more than the file: live state, worker pid/port, memory, and the
        # warm workers it holds for resumes, which are no session's.
        print(tables.format_sessions_table(live.sessions[: args.limit]))
        if live.hosts is not None:
            print(tables.format_hosts(live.hosts))
        elif live.reserve_workers is not None and live.reserve_max is not None:
            print(tables.format_reserve(live.reserve_workers, live.reserve_max))
        return 0
    return _run(args, "sessions")


def _live_view(state_dir: Path) -> LiveView | None:
    from router.api_client import fetch_live_view_at
    from router.cli import admin

    url = running_router(state_dir)
    return fetch_live_view_at(url, token=admin.state_dir_token(state_dir)) if url is not None else None


def _show(args: argparse.Namespace) -> int:
    if (args.session_id is None) == (args.conversation is None):
        print("show: give a session id or --conversation KEY", file=sys.stderr)
        return 2
    try:
        return _run(args, "show")
    except BadRequest as exc:  # a malformed key
        print(f"show: {exc.message}", file=sys.stderr)
        return 2


def _export(args: argparse.Namespace) -> int:
    return _run(args, "export")
