"""Clients of a router whose sessions share workers (``--sessions-per-browser``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.client import RawClient
from tests.support.routers import RouterThread


@contextmanager
def two_clients(router: RouterThread, **initialize: Any) -> Iterator[tuple[RawClient, RawClient]]:
    """Two initialized sessions, deleted on the way out."""
    with RawClient(router.url) as a, RawClient(router.url) as b:
        a.initialize(**initialize)
        b.initialize(**initialize)
        try:
            yield a, b
        finally:
            a.delete()
            b.delete()


def host_output(router: RouterThread, client: RawClient) -> Path:
    """The output dir of the host the client's session is on (it must be on one)."""
    connection = router.manager.sessions.get(client.session_id).connection
    assert router.manager.continuity.shares(connection.worker), "the session is on a host"
    return Path(connection.worker.output_dir)
