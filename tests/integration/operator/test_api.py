"""The read-only JSON API, its two actions and their cross-site protection, and /ui's files."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from router.api_client import base_url, fetch_live_sessions_at
from router.operator import memory
from tests.support import TEST_TOKEN, RawClient, RouterThread, auth_headers, spare_port
from workers import process_memory
from workers.orphans import processes_for

ACTION = {"x-mcp-router-action": "1"}
PNG_A = b"\x89PNG\r\n\x1a\n" + b"inline-image"
PNG_B = b"\x89PNG\r\n\x1a\n" + b"file-image"


def api(router: RouterThread, path: str) -> httpx.Response:
    return httpx.get(router.base_url + path, headers=auth_headers(), timeout=10, trust_env=False)


def post(router: RouterThread, path: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(router.base_url + path, headers={**auth_headers(), **headers}, timeout=10, trust_env=False)


def test_sessions_session_and_call_shapes(rec_router: RouterThread) -> None:
    with RawClient(rec_router.url) as c:
        c.initialize(name="shape-client")
        c.call("echo", text="hello")
        c.call("no_such_tool")

        body = api(rec_router, "/api/sessions").json()
        assert body["recording"] is True
        row = next(s for s in body["sessions"] if s["id"] == c.session_id)
        worker = rec_router.manager.sessions.get(c.session_id).connection.worker
        assert row["state"] == "live" and row["live"] is True
        assert row["client"] == "shape-client 1"
        assert row["calls"] == 2 and row["errors"] == 1
        assert (row["worker_pid"], row["worker_port"]) == (worker.pid, worker.port)
        assert row["memory_bytes"] > 1024 * 1024  # a Python process at least
        assert row["created"] <= row["last_activity"] <= time.time()

        detail = api(rec_router, f"/api/sessions/{c.session_id}").json()
        assert detail["session"]["id"] == c.session_id and detail["session"]["calls"] == 2
        tools = [(x["method"], x["tool"], x["status"]) for x in detail["calls"]]
        assert tools == [("initialize", None, "success"), ("tools/call", "echo", "success"),
                         ("tools/call", "no_such_tool", "error")]
        echo = detail["calls"][1]
        assert echo["params"]["arguments"] == {"text": "hello"} and echo["duration_ms"] > 0

        call = api(rec_router, f"/api/calls/{echo['ref_id']}").json()["call"]
        assert call["session_id"] == c.session_id and call["tool"] == "echo"
        assert json.loads(call["result"])["content"][0]["text"] == "hello"
        assert call["console"] == [] and call["images"] == [] and call["page_snapshot"] is None
        assert c.delete().status_code == 200

    # An ended session stays readable from the record, without live fields.
    row = next(s for s in api(rec_router, "/api/sessions").json()["sessions"] if s["id"] == c.session_id)
    assert (row["state"], row["live"], row["worker_pid"], row["memory_bytes"]) == ("closed", False, None, None)


def test_unknown_ids_are_404(rec_router: RouterThread) -> None:
    assert api(rec_router, "/api/sessions/nope").status_code == 404
    assert api(rec_router, "/api/calls/nope").status_code == 404
    assert api(rec_router, "/api/calls/nope/images/0").status_code == 404
    assert post(rec_router, "/api/sessions/nope/end", ACTION).status_code == 404
    assert api(rec_router, "/api/sessions/nope/picture").status_code == 404


def test_a_session_without_a_browser_has_no_picture_and_no_page(rec_router: RouterThread) -> None:
    with RawClient(rec_router.url) as c:
        c.initialize()
        picture = api(rec_router, f"/api/sessions/{c.session_id}/picture")
        assert picture.status_code == 204 and not picture.content  # nothing to take it from, nothing started
        assert not processes_for(Path(rec_router.settings.state_dir), c.session_id)
        row = api(rec_router, f"/api/sessions/{c.session_id}").json()["session"]
        assert (row["url"], row["title"], row["conversation"]) == (None, None, None)
        c.delete()


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing x-mcp-router-action"),
        ({"x-mcp-router-action": "yes"}, "missing x-mcp-router-action"),
        ({**ACTION, "origin": "http://localhost:1"}, "is not this router"),  # loopback, other port
        ({**ACTION, "origin": "null"}, "Origin not allowed"),  # sandboxed frames; the middleware refuses it
        ({**ACTION, "sec-fetch-site": "cross-site"}, "cross-site"),
        ({**ACTION, "origin": "http://evil.example"}, "Origin not allowed"),  # the app-wide middleware
    ],
)
def test_actions_refuse_cross_site_requests(rec_router: RouterThread, headers: dict[str, str], reason: str) -> None:
    with RawClient(rec_router.url) as c:
        c.initialize()
        c.start_worker()
        for action in ("end", "hibernate"):
            answer = post(rec_router, f"/api/sessions/{c.session_id}/{action}", headers)
            assert answer.status_code == 403, answer.text
            assert reason in answer.text
        assert rec_router.manager.sessions.get(c.session_id).connection.worker.alive()
        assert c.delete().status_code == 200


def test_end_action_ends_the_session_and_its_worker(rec_router: RouterThread) -> None:
    state = rec_router.settings.state_dir
    with RawClient(rec_router.url) as c:
        c.initialize()
        c.start_worker()
        assert processes_for(state, c.session_id)
        same_origin = {**ACTION, "origin": rec_router.base_url, "sec-fetch-site": "same-origin"}
        answer = post(rec_router, f"/api/sessions/{c.session_id}/end", same_origin)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"id": c.session_id, "state": "closed"}
        assert not processes_for(state, c.session_id)
        assert rec_router.manager.sessions.get(c.session_id) is None
        assert c.post({"jsonrpc": "2.0", "id": 9, "method": "ping"}).status_code == 404
        assert post(rec_router, f"/api/sessions/{c.session_id}/end", ACTION).status_code == 404


def test_hibernate_action(rec_router: RouterThread) -> None:
    state = rec_router.settings.state_dir
    with RawClient(rec_router.url) as c:
        c.initialize()
        c.start_worker()
        answer = post(rec_router, f"/api/sessions/{c.session_id}/hibernate", ACTION)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"id": c.session_id, "state": "hibernated"}
        assert not processes_for(state, c.session_id)
        row = api(rec_router, f"/api/sessions/{c.session_id}").json()["session"]
        assert (row["state"], row["live"], row["worker_pid"]) == ("hibernated", True, None)
        again = post(rec_router, f"/api/sessions/{c.session_id}/hibernate", ACTION)
        assert again.status_code == 409 and "hibernated" in again.json()["error"]
        assert c.text("echo", text="awake") == "awake"  # the next call resumes it
        ended = post(rec_router, f"/api/sessions/{c.session_id}/end", ACTION)
        assert ended.status_code == 200 and ended.json()["state"] == "closed"
        assert not processes_for(state, c.session_id)


def _record_call(db: Path, session_id: str, ref_id: str, result: dict[str, Any]) -> None:
    """Writes a call straight into the record (another connection; WAL lets both write)."""
    now = time.time()
    conn = sqlite3.connect(db, timeout=10)
    with conn:
        conn.execute("INSERT INTO sessions (id, created, last_activity, state) VALUES (?, ?, ?, 'closed')",
                     (session_id, now, now))
        conn.execute("INSERT INTO requests (ref_id, session_id, method, tool, params, ts) VALUES (?, ?, ?, ?, ?, ?)",
                     (ref_id, session_id, "tools/call", "browser_take_screenshot", "{}", now))
        conn.execute("INSERT INTO responses (ref_id, status, result, ts, duration_ms) VALUES (?, 'success', ?, ?, 1)",
                     (ref_id, json.dumps(result), now))
    conn.close()


def test_images_are_served_only_from_inside_the_output_dir(rec_router: RouterThread) -> None:
    state = Path(rec_router.settings.state_dir).resolve()
    out = state / "sessions" / "img-session" / "out"
    out.mkdir(parents=True)
    (out / "shot.png").write_bytes(PNG_B)
    (out / "same.png").write_bytes(PNG_A)  # identical to the inline image: listed once
    (state / "secret.png").write_bytes(b"\x89PNG secret outside the output dir")
    (out / "escape.png").symlink_to(state / "secret.png")
    text = "\n".join([
        "### Result",
        f"- [Screenshot]({out}/shot.png)",
        f"- [Same]({out}/same.png)",
        "- [Up](../../secret.png)",
        f"- [Outside]({state}/secret.png)",
        "- [Symlink](escape.png)",
        "- [Etc](/etc/passwd.png)",
    ])
    result = {"content": [
        {"type": "text", "text": text},
        {"type": "image", "mimeType": "image/png", "data": base64.b64encode(PNG_A).decode()},
        {"type": "image", "mimeType": "image/svg+xml", "data": base64.b64encode(b"<svg/>").decode()},
        {"type": "image", "mimeType": "image/png", "data": "not base64!"},
    ]}
    _record_call(state / "router.db", "img-session", "img-ref", result)

    call = api(rec_router, "/api/calls/img-ref").json()["call"]
    assert [(i["source"], i["mime"], i["url"]) for i in call["images"]] == [
        ("result", "image/png", "/api/calls/img-ref/images/0"),
        ("file", "image/png", "/api/calls/img-ref/images/1"),
    ]
    first, second = api(rec_router, "/api/calls/img-ref/images/0"), api(rec_router, "/api/calls/img-ref/images/1")
    assert first.content == PNG_A and second.content == PNG_B
    assert second.headers["content-type"] == "image/png"
    assert second.headers["x-content-type-options"] == "nosniff"
    assert second.headers["content-security-policy"] == "default-src 'none'"
    assert api(rec_router, "/api/calls/img-ref/images/2").status_code == 404
    assert api(rec_router, "/api/calls/img-ref/images/-1").status_code == 404

    # Once the session's files are gone, the inline image is still there; the file is not.
    (out / "shot.png").unlink()
    call = api(rec_router, "/api/calls/img-ref").json()["call"]
    assert [i["source"] for i in call["images"]] == ["result"]


def test_linked_files_outlive_the_output_dir(rec_router: RouterThread) -> None:
    """A screenshot saved under a file name is only linked (no inline image): the record keeps a
    copy, so the dashboard still shows it once the session's output dir is cleared (dormant)."""
    state = Path(rec_router.settings.state_dir).resolve()
    with RawClient(rec_router.url) as c:
        c.initialize()
        c.text("echo", text="spawn")  # the worker (and its output dir) exist from the first call
        out = state / "sessions" / str(c.session_id) / "out"
        (out / "shot.png").write_bytes(PNG_B)
        (out / "page.pdf").write_bytes(b"%PDF-1.4 kept")
        (out / "page-1.yml").write_text("- button [ref=e1]")
        text = "\n".join([
            "### Result", "- [Screenshot of viewport](shot.png)", "- [Page as pdf](page.pdf)",
            "### Snapshot", "- [Snapshot](page-1.yml)",
        ])
        ref_id = c.call("echo", text=text)["result"]["_meta"]["mcp-router/refId"]
        c.delete()
    shutil.rmtree(out, ignore_errors=True)  # what going dormant does
    assert not out.exists()

    call = api(rec_router, f"/api/calls/{ref_id}").json()["call"]
    assert [(i["source"], i["name"]) for i in call["images"]] == [("kept", "shot.png")]
    assert [(f["name"], f["mime"], f["size"]) for f in call["files"]] == [
        ("shot.png", "image/png", len(PNG_B)), ("page.pdf", "application/pdf", 13),
    ]
    assert call["page_snapshot"] == "- button [ref=e1]"  # snapshots stay rows, not kept files
    image = api(rec_router, call["images"][0]["url"])
    assert image.status_code == 200 and image.content == PNG_B
    pdf = api(rec_router, call["files"][1]["url"])
    assert pdf.content == b"%PDF-1.4 kept" and pdf.headers["content-disposition"].startswith("attachment")
    assert pdf.headers["x-content-type-options"] == "nosniff"
    kept = state / "files" / ref_id / "shot.png"
    assert kept.stat().st_mode & 0o777 == 0o600
    for bad in ("page-1.yml", "..%2Frouter.db", "nope.png"):
        assert api(rec_router, f"/api/calls/{ref_id}/files/{bad}").status_code == 404
    timeline = api(rec_router, f"/api/sessions/{c.session_id}").json()["calls"]
    assert next(t for t in timeline if t["ref_id"] == ref_id)["files"] == ["shot.png", "page.pdf"]


def test_the_session_view_tells_why_it_resumed(rec_router: RouterThread) -> None:
    state = Path(rec_router.settings.state_dir).resolve()
    _record_call(state / "router.db", "resumed-session", "resumed-ref", {"content": []})
    conn = sqlite3.connect(state / "router.db", timeout=10)
    with conn:
        conn.executemany(
            "INSERT INTO session_events (session_id, ts, kind, detail) VALUES ('resumed-session', ?, 'resumed', ?)",
            [(time.time() + i, reason) for i, reason in enumerate(("idle", "crash", "router-restart"))],
        )
    conn.close()
    body = api(rec_router, "/api/sessions/resumed-session").json()
    assert [(e["kind"], e["detail"]) for e in body["events"]] == [
        ("resumed", "idle"), ("resumed", "crash"), ("resumed", "router-restart"),
    ]
    assert body["session"]["last_resume"] == "router-restart"
    row = next(r for r in api(rec_router, "/api/sessions").json()["sessions"] if r["id"] == "resumed-session")
    assert row["last_resume"] == "router-restart"


def test_ui_is_served_with_a_strict_csp(rec_router: RouterThread) -> None:
    redirect = httpx.get(rec_router.base_url + "/ui", headers=auth_headers(), trust_env=False)
    assert redirect.status_code == 308 and redirect.headers["location"] == "/ui/"
    page = api(rec_router, "/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "img-src 'self' data:" in csp and "frame-ancestors 'none'" in csp
    assert '<script src="app.js">' in page.text and "<script>" not in page.text  # no inline script
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        asset = api(rec_router, f"/ui/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert asset.headers["content-security-policy"] == csp
    assert "innerHTML" not in api(rec_router, "/ui/app.js").text.split("never innerHTML", 1)[1]
    for bad in ("/ui/../app.py", "/ui/%2e%2e%2fapp.py", "/ui/nope.js"):
        assert api(rec_router, bad).status_code == 404


def test_fetch_live_sessions(rec_router: RouterThread) -> None:
    with RawClient(rec_router.url) as c:
        c.initialize()
        rows = fetch_live_sessions_at(base_url("127.0.0.1", rec_router.port), token=TEST_TOKEN)
        assert rows is not None
        assert any(r["id"] == c.session_id and r["live"] for r in rows)
        # bound to all: reached on loopback
        assert fetch_live_sessions_at(base_url("0.0.0.0", rec_router.port), token=TEST_TOKEN) is not None
        assert fetch_live_sessions_at(base_url("127.0.0.1", rec_router.port)) is None  # no token, no sessions
        c.delete()
    assert fetch_live_sessions_at(base_url("127.0.0.1", spare_port())) is None


def test_memory_sampler_caches_and_counts_the_whole_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        own = process_memory.pss_bytes(os.getpid())
        tree = process_memory.tree_pss({"me": os.getpid()})["me"]
        assert 0 < own < tree  # the child's pages count too
        calls: list[dict[str, int]] = []
        real = process_memory.tree_pss

        def counting(roots: dict[str, int]) -> dict[str, int]:
            calls.append(dict(roots))
            return real(roots)

        monkeypatch.setattr(process_memory, "tree_pss", counting)
        sampler = memory.MemorySampler(ttl=60)

        async def scenario() -> None:
            first = await sampler.sample({"me": os.getpid()})
            assert await sampler.sample({"me": os.getpid()}) == first and len(calls) == 1  # cached
            await sampler.sample({"me": os.getpid(), "child": child.pid})  # a new session: sampled again
            assert len(calls) == 2

        anyio.run(scenario)
        assert process_memory.pss_bytes(2**22 + 1) == 0  # no such process
    finally:
        child.kill()
        child.wait()
