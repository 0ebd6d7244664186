"""The tests' token. Routers under test ask for one like any other: ``router_settings`` and
``serve_process`` put TEST_TOKEN into the state dir's token file before the router starts (a
router reads a token file it finds, as it does on every start but the first), and ``RawClient``
shows it unless told otherwise (``token=None`` for a client without one). ``auth_headers()`` is
the same for plain httpx calls."""

from __future__ import annotations

from pathlib import Path

from router.http.auth import token_path

TEST_TOKEN = "test-token-" + "0123456789abcdef" * 3  # long enough for the router's weak-token check


def seed_token(state_dir: Path, token: str = TEST_TOKEN) -> str:
    """Give a state dir the tests' token (unless it has one already); returns the token in force."""
    path = token_path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(token + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


def auth_headers(token: str | None = TEST_TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}
