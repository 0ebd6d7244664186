"""Origin and Host checks for every HTTP request (DNS-rebinding and cross-site protection)."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from router.errors import BadRequest, Forbidden, MisdirectedRequest, RouterError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
WILDCARD = "*"


def split_host(value: str) -> tuple[str, str | None]:
    """'example.com:80' → ('example.com', '80'); '[::1]:4000' → ('[::1]', '4000')."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end == -1:
            return value, None
        rest = value[end + 1 :]
        return value[: end + 1], rest[1:] if rest.startswith(":") else None
    name, sep, port = value.rpartition(":")
    return (name, port) if sep and port.isdigit() else (value, None)


class OriginPolicy:
    """Allows loopback by default; extra entries are exact values or 'name:*' / '*' wildcards."""

    def __init__(self, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()) -> None:
        self._hosts = {h.strip().lower() for h in allowed_hosts}
        self._origins = {o.strip().lower().rstrip("/") for o in allowed_origins}

    def host_allowed(self, host: str | None) -> bool:
        if host is None:
            # HTTP/1.0 clients may omit Host; nothing to rebind through then.
            return True
        if WILDCARD in self._hosts:
            return True
        name, _ = split_host(host)
        value = host.strip().lower()
        return name in LOOPBACK_NAMES or value in self._hosts or f"{name}:*" in self._hosts or name in self._hosts

    def origin_allowed(self, origin: str | None) -> bool:
        if origin is None:
            return True  # not a browser: Origin checks protect browsers from cross-site pages
        origin = origin.strip().lower().rstrip("/")
        if WILDCARD in self._origins or origin in self._origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        name, _ = split_host(parts.netloc)
        return name in LOOPBACK_NAMES or f"{parts.scheme}://{name}:*" in self._origins


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = request_refusal(self.policy, scope["headers"])
        if refusal is not None:
            await refusal.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)


def request_refusal(policy: OriginPolicy, headers: Iterable[tuple[bytes, bytes]]) -> RouterError | None:
    """What a request with these headers gets instead of an answer, or None when it may go on."""
    host = origin = None
    hosts = origins = 0
    for key, value in headers:
        if key == b"host":
            host = value.decode("latin-1")
            hosts += 1
        elif key == b"origin":
            origin = value.decode("latin-1")
            origins += 1
    if hosts > 1 or origins > 1:
        # Which one counts would differ between the checks here and whatever reads the request
        # next; RFC 9112 answers two Hosts with 400, and a browser never sends two of either.
        return BadRequest("more than one Host or Origin header")
    if not policy.host_allowed(host):
        return MisdirectedRequest(f"Host not allowed: {host!r}")
    if not policy.origin_allowed(origin):
        return Forbidden(f"Origin not allowed: {origin!r}")
    return None
