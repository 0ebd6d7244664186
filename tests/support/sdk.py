"""The Python SDK client as the router's tests use it: a named session, found again on the router."""

from __future__ import annotations

import warnings
from typing import Any

from mcp import Client, MCPDeprecationWarning
from mcp_types import Implementation

from tests.support.auth import TEST_TOKEN


def sdk_client(router: Any, name: str, message_handler: Any = None) -> Client:
    """A session-mode client whose session the router knows by ``name`` (see ``session_named``).
    The token rides on the URL: the SDK client takes a URL only."""
    return Client(
        f"{router.url}?token={TEST_TOKEN}", mode="legacy", message_handler=message_handler,
        client_info=Implementation(name=name, version="1"),
    )  # fmt: skip


def session_named(router: Any, name: str) -> Any:
    """The router's live session of the client called ``name`` (exactly one)."""
    found = [s for s in router.manager.sessions.live() if s.client_info.get("name") == name]
    assert len(found) == 1, found
    return found[0]


async def subscribe(client: Client, uri: str) -> None:
    """The SDK warns that 2026-07-28 drops resources/subscribe; a session client still has it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.subscribe_resource(uri)
