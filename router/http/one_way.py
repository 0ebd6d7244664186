"""A client's one-way messages on /mcp: notifications, and its answers to the worker's requests.
Each gets 202 and no body; what reaches a worker is forwarded to the one it is for.

A live session never answers 404 here: only an ended one does (a client re-initializes on 404,
and a spec client loses its browser with it). A worker that lost our MCP session answers 404
itself: the notification had nothing left to act on, and the session's next request reopens
one (endpoint.py), so the client gets 202 as if it had been delivered.
"""

from __future__ import annotations

import json
import logging
from typing import Final

from starlette.types import Scope, Send

from router.http.streaming import send_accepted, send_start
from router.http.worker_faults import unreachable, worker_died
from router.protocol.messages import ClientMessage, Kind
from router.sessions.roots import ROOTS_CHANGED
from router.sessions.table import Session
from router.types import CANCELLED
from router.upstream.client import UpstreamError
from router.upstream.connection import downstream_headers, upstream_headers

log = logging.getLogger("mcp_router.endpoint")

ROUTER_ANSWERED_NOTIFICATIONS: Final = frozenset({"notifications/initialized"})
SESSION_LOST: Final = 404  # what a worker answers for an MCP session it closed


async def forward_one_way(session: Session, scope: Scope, message: ClientMessage, send: Send) -> None:
    """Notifications and the client's answers to the worker's requests: 202, no body.

    An answer goes to the worker session that asked; one for a worker session that is gone is dropped."""
    if message.kind is Kind.RESPONSE and session.roots.take_answer(message.id, message.body):
        await send_accepted(send, session)  # the router asked it (router/sessions/roots.py)
        return
    if message.method == ROOTS_CHANGED:  # still goes to the worker below
        session.roots.changed()
        session.ask_roots()
    if message.method == CANCELLED:
        # A request not sent yet is then never sent (endpoint.py); one sent hears of it below.
        session.requests.cancel(message.params.get("requestId"))
    connection, raw = session.connection, message.raw
    if message.kind is Kind.RESPONSE and session.asked.ours(message.id):
        # The worker's request, under the id the client saw: back under the worker's own, to
        # the worker session that asked, if it is still the session's. Else it is dropped: a
        # session reopened on the same worker numbers from 0 again and would take it for the
        # answer to a request of its own.
        asker = session.asked.take(message.id)
        if asker is None or not asker.is_from(connection, session.worker_session_id):
            await send_accepted(send, session)
            return
        raw = json.dumps({**message.body, "id": asker.request_id}).encode()
    # An answer under an id the router did not give goes to the worker as it is: one to a request
    # the worker made on a POST's answer stream, whose id the client saw unchanged.
    if (
        connection is None  # a dormant session: nothing there to notify or answer, no reason to wake it
        or message.method in ROUTER_ANSWERED_NOTIFICATIONS  # the replayed handshake sent its own
    ):
        await send_accepted(send, session)
        return
    headers = upstream_headers(
        scope["headers"], host=connection.host_header, worker_session_id=session.worker_session_id
    )
    try:
        upstream = await connection.send("POST", headers, raw)
        body = await upstream.aread()
        await upstream.aclose()
    except UpstreamError as exc:
        if (
            message.kind is Kind.RESPONSE  # first: an answer is dropped without a wait
            or session.connection is not connection
            or await worker_died(connection, exc)
        ):
            await send_accepted(send, session)  # dormant or dead meanwhile: as if it had been
            return
        raise unreachable(session, exc) from None
    status = upstream.status_code
    if status >= 500 or status == SESSION_LOST or (message.kind is Kind.RESPONSE and status >= 400):
        # The worker's trouble, not the client's: nothing a client could do about it, and a 404
        # would read as the router's session gone.
        log.debug("worker refused a %s session=%s status=%d", message.kind.value, session.id, status)
        await send_accepted(send, session)
        return
    await send_start(send, status, downstream_headers(upstream.headers, router_session_id=session.id))
    await send({"type": "http.response.body", "body": b"" if status == 202 else body})
