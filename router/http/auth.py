"""The token at the door: one secret in ``<state_dir>/token``, asked for on every route but /healthz.

A client shows it as ``Authorization: Bearer <token>`` or, when it cannot set headers, as
``?token=<token>`` on the URL. The dashboard's browser shows a cookie instead, set by
``POST /ui/login``; the cookie carries a value derived from the token, accepted on /ui and /api
only, so a cookie that leaks (cookies are shared by every port of a host) cannot drive /mcp.

``--auth none`` opens /mcp, /metrics and /healthz only. The dashboard and /api still ask: they
hold every conversation's record, and a page in a conversation's own browser can lead the model
there by a redirect, which the browsers' blocked origins do not stop.

Whatever carried the credential is removed from the request before it goes on: the proxy, the
record and the access log never see it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from router.errors import BadRequest, Unauthorized
from router.types import HEALTHZ_PATH

TOKEN_FILE: Final = "token"
TOKEN_BYTES: Final = 32  # 256 bits; the floor is 128
MIN_TOKEN_CHARS: Final = 32  # a hand-written token shorter than this is refused as weak
QUERY_PARAM: Final = "token"
COOKIE_PREFIX: Final = "mcp_router_"  # + port: one cookie per router on a shared host name
COOKIE_PURPOSE: Final = b"mcp-router dashboard cookie"
LOGIN_PATH: Final = "/ui/login"
MAX_LOGIN_BODY: Final = 4096
# Reachable without the token: liveness, and what a browser needs to show the login form.
OPEN_PATHS: Final = frozenset({HEALTHZ_PATH, LOGIN_PATH, "/ui/login.js", "/ui/style.css"})
# The dashboard's document: a browser without the cookie is sent to the login form.
UI_DOCUMENTS: Final = frozenset({"/ui", "/ui/", "/ui/index.html"})
COOKIE_PREFIXES: Final = ("/ui", "/api/")
STATE_KEY: Final = "authenticated"  # set in the request's state for handlers (/healthz) to read
# Also in the request's state: the scope a conversation key is hashed in (router/sessions/conversations.py).
SCOPE_KEY: Final = "conversation_scope"
CONVERSATION_PURPOSE: Final = b"mcp-router conversation scope"
OPEN_SCOPE: Final = "open"  # a request that showed no token (--auth none)


class WeakToken(ValueError):
    pass


# -- the state dir and the token file ---------------------------------------------------------


def private_state_dir(path: Path) -> Path:
    """The state dir, made if needed, readable by its owner only: it holds every recorded call,
    saved cookies and browser profiles, and the token."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_mode & 0o077 and info.st_uid == os.geteuid():
        path.chmod(0o700)
    return path



def token_path(state_dir: Path) -> Path:
    return Path(state_dir) / TOKEN_FILE


def read_token(state_dir: Path) -> str | None:
    """The token, or None when there is none yet. Raises WeakToken for a file too short to trust."""
    try:
        token = token_path(state_dir).read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise WeakToken(f"{token_path(state_dir)} holds a token shorter than {MIN_TOKEN_CHARS} characters")
    return token


def load_or_create_token(state_dir: Path) -> str:
    """The token of this state dir, generated on first use: mode 0600, created atomically (a
    concurrent first start gets the same token, and nobody ever reads a half-written file)."""
    path = token_path(state_dir)
    existing = read_token(state_dir)
    if existing is not None:
        with contextlib.suppress(OSError):  # not ours to fix when another user owns it
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)
        return existing
    token = secrets.token_urlsafe(TOKEN_BYTES)
    temp = path.with_name(f".{TOKEN_FILE}.{secrets.token_hex(8)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        with contextlib.suppress(FileExistsError):  # someone else created it first: theirs wins
            os.link(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    found = read_token(state_dir)
    assert found is not None
    return found


# -- the bind rule ------------------------------------------------------------------------------


def is_loopback_host(host: str) -> bool:
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bind_problem(host: str, auth: str) -> str | None:
    """Why this host/auth pair must not start, or None."""
    if auth == "none" and not is_loopback_host(host):
        return (
            f"--auth none is accepted only on a loopback bind (127.0.0.1, ::1, localhost), not on {host!r}: "
            "anyone who reaches the port could drive the browsers. Keep --auth token "
            "(the default; `mcp-router token` prints it) or bind to 127.0.0.1."
        )
    return None


# -- checking requests --------------------------------------------------------------------------


def cookie_name(port: int) -> str:
    return f"{COOKIE_PREFIX}{port}"


def cookie_value(token: str) -> str:
    return hmac.new(token.encode(), COOKIE_PURPOSE, hashlib.sha256).hexdigest()


def conversation_scope(token: str | None) -> str:
    """Where a request's conversation keys live: a value derived from the token it showed, so
    that the same key under another token names another conversation, and no file holds the token."""
    return hmac.new(token.encode(), CONVERSATION_PURPOSE, hashlib.sha256).hexdigest() if token else OPEN_SCOPE


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


class TokenAuth:
    """What a request must show, and how the dashboard logs in."""

    def __init__(self, token: str, *, port: int, open_paths: frozenset[str] = frozenset()) -> None:
        self._token = token
        self._cookie = cookie_value(token)
        self.conversation_scope = conversation_scope(token)
        self.cookie_name = cookie_name(port)
        # Paths served without a credential, a request to them counting as authenticated
        # (--auth none: /mcp, /metrics, and /healthz's details); everything else still asks.
        self.open_paths = open_paths

    def bearer_ok(self, value: str) -> bool:
        return _same(value, self._token)

    def cookie_ok(self, value: str) -> bool:
        return _same(value, self._cookie)

    def routes(self) -> list[Route]:
        return [Route(LOGIN_PATH, self.login, methods=["POST"])]

    async def login(self, request: Request) -> Response:
        """``{"token": "..."}`` → 204 with the dashboard cookie, or 401."""
        body = await request.body()
        if len(body) > MAX_LOGIN_BODY:
            return BadRequest("login body too large").response()
        try:
            given = json.loads(body).get("token")
        except (ValueError, AttributeError):
            given = None
        if not isinstance(given, str) or not self.bearer_ok(given):
            return Unauthorized("wrong token", invalid=True).response()
        response = Response(status_code=204)
        response.set_cookie(self.cookie_name, self._cookie, path="/", httponly=True, samesite="strict")
        return response


class AuthMiddleware:
    def __init__(self, app: ASGIApp, auth: TokenAuth | None) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.auth is None:
            if scope["type"] == "http":
                scope.setdefault("state", {}).update({STATE_KEY: True, SCOPE_KEY: OPEN_SCOPE})
            await self.app(scope, receive, send)
            return
        shown = self._take_credentials(scope, self.auth)
        path: str = scope["path"]
        opened = path in self.auth.open_paths
        scope.setdefault("state", {}).update(
            {STATE_KEY: shown is True or opened, SCOPE_KEY: self.auth.conversation_scope if shown else OPEN_SCOPE}
        )
        if shown is True or opened or path in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if path in UI_DOCUMENTS and scope["method"] in ("GET", "HEAD"):
            await RedirectResponse(LOGIN_PATH, status_code=303)(scope, receive, send)
            return
        error = Unauthorized("a token is required" if shown is None else "wrong token", invalid=shown is False)
        await error.response()(scope, receive, send)

    @staticmethod
    def _take_credentials(scope: Scope, auth: TokenAuth) -> bool | None:
        """True: a good credential; False: only wrong ones; None: none at all. Removes them all."""
        verdicts, scope["headers"] = header_credentials(scope["headers"], auth, path=scope["path"])
        query: bytes = scope.get("query_string", b"")
        if QUERY_PARAM.encode() in query:
            pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
            given = [v for k, v in pairs if k == QUERY_PARAM]
            if given:
                verdicts += [auth.bearer_ok(v) for v in given]
                # In place: uvicorn's access log reads this same scope.
                rest = [(k, v) for k, v in pairs if k != QUERY_PARAM]
                scope["query_string"] = urlencode(rest).encode("latin-1")
        if not verdicts:
            return None
        return any(verdicts)


def header_credentials(
    headers: Iterable[tuple[bytes, bytes]], auth: TokenAuth, *, path: str
) -> tuple[list[bool], list[tuple[bytes, bytes]]]:
    """The verdict on each credential the headers show (a bearer token; our cookie, on the paths
    that take it), and the headers without them: nothing behind the router ever sees the token."""
    verdicts: list[bool] = []
    kept_headers = []
    for key, value in headers:
        if key == b"authorization":
            scheme, _, credential = value.decode("latin-1").partition(" ")
            verdicts.append(scheme.lower() == "bearer" and auth.bearer_ok(credential.strip()))
            continue
        if key == b"cookie":
            kept, found = _split_cookie(value.decode("latin-1"), auth.cookie_name)
            if found is not None and path.startswith(COOKIE_PREFIXES):
                verdicts.append(auth.cookie_ok(found))
            if kept:
                kept_headers.append((key, kept.encode("latin-1")))
            continue
        kept_headers.append((key, value))
    return verdicts, kept_headers


def _split_cookie(header: str, name: str) -> tuple[str, str | None]:
    """(the header without our cookie, our cookie's value or None)."""
    found = None
    kept = []
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            found = value
        elif part.strip():
            kept.append(part.strip())
    return "; ".join(kept), found
