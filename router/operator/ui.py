"""Serves the dashboard's static files (router/operator/static/) at /ui with a strict Content-Security-Policy.

The files are a handful of small texts shipped in the package: read once when the app is built,
served from memory. Only the names listed here are served, so no path from a URL ever reaches the
file system.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

UI_DIR: Final = Path(__file__).resolve().parent / "static"
FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "login.html": "text/html; charset=utf-8",
    "login.js": "text/javascript; charset=utf-8",
}
# Everything from this origin only; images may also be data: URIs. No inline script or style, no
# framing (clickjacking of the end/hibernate buttons), no form posts anywhere.
CSP: Final = (
    "default-src 'self'; img-src 'self' data: blob:; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS: Final = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


class Ui:
    def __init__(self, directory: Path = UI_DIR) -> None:
        self.files = {name: (directory / name).read_bytes() for name in FILES}

    def routes(self) -> list[Route]:
        return [
            Route("/ui", self.redirect, methods=["GET"]),
            Route("/ui/", self.serve, methods=["GET", "HEAD"]),
            # The sign-in form (router/http/auth.py answers its POST and lets it through unsigned).
            Route("/ui/login", self.login_page, methods=["GET", "HEAD"]),
            Route("/ui/{name}", self.serve, methods=["GET", "HEAD"]),
        ]

    async def redirect(self, request: Request) -> Response:
        # Relative asset URLs in index.html resolve under /ui/ only with the trailing slash.
        return RedirectResponse("/ui/", status_code=308)

    async def login_page(self, request: Request) -> Response:
        return Response(self.files["login.html"], media_type=FILES["login.html"], headers=HEADERS)

    async def serve(self, request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        body = self.files.get(name)
        if body is None:
            return Response("not found", status_code=404, media_type="text/plain", headers=HEADERS)
        return Response(body, media_type=FILES[name], headers=HEADERS)
