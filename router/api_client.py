"""Client side of the JSON API, for CLI commands that want the live state of a running router."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import httpx

TIMEOUT: Final = 1.0  # a CLI must not hang on a router that is not there; loopback answers in ms
# A router bound to every address is reached over loopback; its Host check accepts that name.
_CONNECT_HOSTS: Final = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def connect_host(host: str) -> str:
    """The address a client on this machine dials for a router bound to ``host``."""
    return _CONNECT_HOSTS.get(host, host)


def base_url(host: str, port: int) -> str:
    target = connect_host(host)
    return f"http://[{target}]:{port}" if ":" in target else f"http://{target}:{port}"


def bearer(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


@dataclass(frozen=True)
class LiveView:
    """GET /api/sessions of a running router: its session rows, and its resume reserve (warm
    workers held for dormant sessions' resumes, which no row shows; None from a router that
    does not tell)."""

    sessions: list[dict[str, Any]]
    reserve_workers: int | None = None
    reserve_max: int | None = None
    hosts: list[dict[str, Any]] | None = None  # workers sessions share (--sessions-per-browser > 1)


def fetch_live_sessions_at(
    url: str, *, token: str | None = None, timeout: float = TIMEOUT
) -> list[dict[str, Any]] | None:
    """The rows of GET /api/sessions of the router at a base URL (e.g. the one
    ``router.router_file.running_router(state_dir)`` finds): live state merged with the record, or
    None when no router answers there (or something else does, or the token is wrong)."""
    view = fetch_live_view_at(url, token=token, timeout=timeout)
    return view.sessions if view is not None else None


def fetch_live_view_at(url: str, *, token: str | None = None, timeout: float = TIMEOUT) -> LiveView | None:
    """The rows and the resume reserve from a base URL, or None when no router answers there."""
    try:
        response = httpx.get(
            f"{url.rstrip('/')}/api/sessions", headers=bearer(token), timeout=timeout, trust_env=False
        )
        if response.status_code != 200:
            return None
        body = response.json()
    except (httpx.HTTPError, ValueError):
        return None
    sessions = body.get("sessions") if isinstance(body, dict) else None
    if not isinstance(sessions, list):
        return None
    reserve = body.get("reserve")
    workers, cap = (reserve.get("workers"), reserve.get("max")) if isinstance(reserve, dict) else (None, None)
    hosts = body.get("hosts")
    return LiveView(
        [s for s in sessions if isinstance(s, dict)],
        workers if isinstance(workers, int) else None,
        cap if isinstance(cap, int) else None,
        [h for h in hosts if isinstance(h, dict)] if isinstance(hosts, list) else None,
    )
