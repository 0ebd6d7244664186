"""Resources and prompts through the real worker, with the Python and TypeScript SDK clients:
the page resource follows a navigation (subscribe, notifications/resources/updated, read back),
a screenshot and a new tab appear in the list (list_changed), the image reads back, another
session's resources are refused, and a dormant session reads its own without a spawn."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from mcp import MCPError
from mcp_types import ResourceListChangedNotification, ResourceUpdatedNotification

from router.catalog.resources import uri
from router.operator.api import ACTION_HEADER
from tests.support import REF_KEY, ROOT, RouterThread, async_wait_for, auth_headers
from tests.support.sdk import sdk_client, session_named, subscribe
from workers.orphans import processes_for

RESOURCE_NOT_FOUND: Final = -32002
INVALID_PARAMS: Final = -32602
NOTICE_WAIT: Final = 30.0  # a navigation on a loaded 2-core machine, then the GET stream
WORKER_GONE: Final = 30.0
PNG_MAGIC: Final = b"\x89PNG"
SDK_DIST: Final = ROOT / "workers" / "node_modules" / "@modelcontextprotocol" / "sdk" / "dist"


class Heard:
    """What the router said on the client's GET stream."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.list_changes = 0

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
        elif isinstance(message, ResourceListChangedNotification):
            self.list_changes += 1


def contents(result: Any) -> Any:
    return result.contents[0]


async def test_page_resource_follows_navigation_and_screenshots_are_listed(
    pw_router: RouterThread, pages: str
) -> None:
    heard = Heard()
    async with sdk_client(pw_router, "res-nav", heard) as c, sdk_client(pw_router, "res-other") as other:
        await c.call_tool("browser_navigate", {"url": f"{pages}/"})
        session = session_named(pw_router, "res-nav")
        page_uri = uri("page", session.id, 0)
        assert page_uri in [str(r.uri) for r in (await c.list_resources()).resources]
        await subscribe(c, page_uri)
        await c.call_tool("browser_navigate", {"url": f"{pages}/second"})
        await async_wait_for(lambda: page_uri in heard.updated, within=NOTICE_WAIT)
        page = json.loads(contents(await c.read_resource(page_uri)).text)
        assert page["url"] == f"{pages}/second" and page["title"] == "Second" and page["current"] is True
        assert "This is the second page" in page["snapshot"] and page["last_change"]["tool"] == "browser_navigate"
        state = json.loads(contents(await c.read_resource(uri("session", session.id))).text)
        assert state["url"] == f"{pages}/second" and state["calls"] == 2 and state["state"] == "live"

        before = heard.list_changes
        shot = await c.call_tool("browser_take_screenshot", {})
        ref_id = (shot.meta or {})[REF_KEY]
        await async_wait_for(lambda: heard.list_changes > before, within=NOTICE_WAIT)
        shot_uri = uri("screenshot", session.id, ref_id)
        assert shot_uri in [str(r.uri) for r in (await c.list_resources()).resources]
        image = contents(await c.read_resource(shot_uri))
        assert image.mime_type in ("image/png", "image/jpeg")
        assert base64.b64decode(image.blob).startswith(PNG_MAGIC) or image.mime_type == "image/jpeg"
        # The record keeps the read, not another copy of the image (written soon after; a read
        # that is no tool call does not wait for its row).
        def kept_reads() -> list[tuple[str]]:
            with sqlite3.connect(pw_router.settings.state_dir / "router.db") as db:
                return db.execute(
                    "SELECT p.result FROM requests r JOIN responses p ON p.ref_id = r.ref_id"
                    " WHERE r.session_id = ? AND r.method = 'resources/read' AND r.params LIKE ?",
                    (session.id, f"%{ref_id}%"),
                ).fetchall()

        await async_wait_for(kept_reads, within=NOTICE_WAIT)
        kept = kept_reads()
        assert kept and all('"blob_chars"' in row[0] and image.blob not in row[0] for row in kept)

        before = heard.list_changes
        await c.call_tool("browser_tabs", {"action": "new", "url": f"{pages}/"})
        await async_wait_for(lambda: heard.list_changes > before, within=NOTICE_WAIT)
        second_tab = json.loads(contents(await c.read_resource(uri("page", session.id, 1))).text)
        assert second_tab["url"] == f"{pages}/" and second_tab["current"] is True
        assert json.loads(contents(await c.read_resource(page_uri)).text)["current"] is False

        for address in (page_uri, shot_uri, uri("session", session.id)):
            with pytest.raises(MCPError) as refused:
                await other.read_resource(address)
            assert refused.value.error.code == RESOURCE_NOT_FOUND


async def test_dormant_session_reads_its_resources_without_a_spawn(pw_router: RouterThread, pages: str) -> None:
    state_dir = pw_router.settings.state_dir
    async with sdk_client(pw_router, "res-dormant") as c:
        await c.call_tool("browser_navigate", {"url": f"{pages}/second"})
        session = session_named(pw_router, "res-dormant")
        async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
            response = await http.post(
                f"{pw_router.base_url}/api/sessions/{session.id}/hibernate",
                headers={ACTION_HEADER: "1", **auth_headers()},
            )
        assert response.status_code == 200, response.text
        await async_wait_for(lambda: not processes_for(state_dir, session.id), within=WORKER_GONE)
        assert session.connection is None
        listed = [str(r.uri) for r in (await c.list_resources()).resources]
        page = json.loads(contents(await c.read_resource(uri("page", session.id, 0))).text)
        state = json.loads(contents(await c.read_resource(uri("session", session.id))).text)
        prompts = (await c.list_prompts()).prompts
        assert uri("page", session.id, 0) in listed and prompts
        assert page["title"] == "Second" and "This is the second page" in page["snapshot"]
        assert state["state"] == "hibernated"
        # Nothing was spawned or resumed for any of it.
        assert session.connection is None and not processes_for(state_dir, session.id)


def test_typescript_sdk_subscribes_reads_and_gets_prompts(pw_router: RouterThread, pages: str) -> None:
    assert SDK_DIST.exists(), "the TypeScript SDK is missing: scripts/setup runs npm ci in workers/"
    other = uri("page", "x" * 32, 0)  # no such session: refused exactly like another session's
    out = subprocess.run(
        ["node", str(Path(__file__).with_name("ts_resources_client.mjs")), str(SDK_DIST), pw_router.url,
         f"{pages}/", f"{pages}/second", other],
        env={**os.environ, "MCP_ROUTER_TOKEN": pw_router.token},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    page_uri = uri("page", answer["sessionId"], 0)
    assert answer["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
    assert page_uri in answer["listed"] and page_uri in answer["updates"]
    assert answer["page"]["title"] == "Second" and "This is the second page" in answer["page"]["snapshot"]
    assert {"web-scraping", "login-flow", "e2e-user-flow"} <= set(answer["prompts"])
    assert f"{pages}/" in answer["promptText"] and "browser_navigate" in answer["promptText"]
    assert answer["missingArgument"] == INVALID_PARAMS
    assert answer["otherSession"] == RESOURCE_NOT_FOUND
