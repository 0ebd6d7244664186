"""What the tests share: waiting, the SSE reader, a raw client, routers in a thread or as a
process, the page server. Fixtures built on these live in tests/conftest.py."""

from tests.support.auth import TEST_TOKEN, auth_headers, seed_token
from tests.support.client import (
    ACCEPT_BOTH,
    REF_KEY,
    RawClient,
    find_ref,
    initialize_body,
    raw_post,
    read_until_closed,
    ref_of,
    text_of,
    whoami,
)
from tests.support.pages import PAGES, serve_pages
from tests.support.procs import dead, renderers_of
from tests.support.routers import (
    FAKE_WORKER,
    FAKE_WORKER_COMMAND,
    ROOT,
    STANDIN_WORKER_COMMAND,
    RouterThread,
    asgi_in_thread,
    playwright_router,
    router_settings,
    spare_port,
)
from tests.support.saved import saved_state, wait_saved
from tests.support.serve import ServeProcess, run_cli, serve_process
from tests.support.sse import iter_sse, messages_of, sse_events, sse_messages
from tests.support.wait import WAIT_TIMEOUT, async_wait_for, wait_for, wait_recorded

__all__ = [
    "ACCEPT_BOTH",
    "FAKE_WORKER",
    "FAKE_WORKER_COMMAND",
    "PAGES",
    "REF_KEY",
    "ROOT",
    "STANDIN_WORKER_COMMAND",
    "TEST_TOKEN",
    "WAIT_TIMEOUT",
    "RawClient",
    "RouterThread",
    "ServeProcess",
    "asgi_in_thread",
    "async_wait_for",
    "auth_headers",
    "dead",
    "find_ref",
    "initialize_body",
    "iter_sse",
    "messages_of",
    "playwright_router",
    "raw_post",
    "read_until_closed",
    "ref_of",
    "renderers_of",
    "router_settings",
    "run_cli",
    "saved_state",
    "seed_token",
    "serve_pages",
    "serve_process",
    "spare_port",
    "sse_events",
    "sse_messages",
    "text_of",
    "wait_for",
    "wait_recorded",
    "wait_saved",
    "whoami",
]
