from __future__ import annotations

from tests.support import RawClient, RouterThread


def test_initialize_and_call_through_router(fake_router: RouterThread) -> None:
    with RawClient(fake_router.url) as client:
        init = client.initialize()
        assert init.headers["mcp-session-id"] == client.session_id
        assert client.text("echo", text="hello") == "hello"
        assert client.delete().status_code == 200
        assert client.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).status_code == 404
