"""The application's front door: /mcp straight to its own chain, everything else through Starlette.

Every tool call goes to /mcp, and Starlette's generic stack costs it a measurable share of the
router's time per call: two exception-catching middlewares that each wrap ``send``, and a regex
match against every route. The /mcp chain (security, auth, timing, endpoint) already answers every
error it expects as JSON-RPC, so the only thing the generic stack added on this path was the
last-resort 500: ``serve_guarded`` gives that, as a JSON-RPC error body, and re-raises so the
server logs the bug. Other paths (health, metrics, the operator API and UI) keep the full stack.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from router.http.errors import INTERNAL_ERROR, error_body

__all__ = ["INTERNAL_ERROR_HEADERS", "RouterApp", "route_path", "serve_guarded"]


INTERNAL_ERROR_HEADERS: Final = ((b"content-type", b"application/json"),)


async def serve_guarded(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run ``app``; an exception it lets out becomes a JSON-RPC 500 when nothing was sent yet
    (a half-sent answer can only be cut off), and is raised again for the server to log."""
    started = False

    async def tracking_send(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    try:
        await app(scope, receive, tracking_send)
    except Exception:
        if not started:
            body = error_body(INTERNAL_ERROR, "Internal error")
            headers = [*INTERNAL_ERROR_HEADERS, (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 500, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        raise


def route_path(scope: Scope) -> str:
    """The path the routes see: under a ``root_path`` (a proxy's prefix), the part after it, as
    Starlette's router matches it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] in ("/", ""):
        return path[len(root):]
    return path


class RouterApp(Starlette):
    """A Starlette app whose ``fast_path`` (an exact path and the ASGI app that serves it) skips
    the generic middleware stack and route matching. Lifespan and every other path are Starlette's."""

    def __init__(self, *args: Any, fast_path: tuple[str, ASGIApp], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fast_path = fast_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and route_path(scope) == self.fast_path[0]:
            await self.serve_fast_path(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def serve_fast_path(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The fast path's app, for a request already known to be on its path (the server's
        direct lane hands it those: router/http/direct.py)."""
        scope["app"] = self
        await serve_guarded(self.fast_path[1], scope, receive, send)
