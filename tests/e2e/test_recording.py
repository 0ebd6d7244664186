"""Recording through the real worker: every table filled by a real flow, read back; the router's
tools; compact answers; the CLI."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from tests.integration.operator.test_metrics import scrape
from tests.support import RawClient, RouterThread, find_ref, ref_of, run_cli, text_of, wait_recorded


def flow(c: RawClient, pages: str) -> dict[str, Any]:
    nav = c.call("browser_navigate", url=f"{pages}/")
    snap = c.call("browser_snapshot")
    click = c.call("browser_click", target=find_ref(text_of(snap), "Click me"), element="Click me button")
    second = c.call("browser_navigate", url=f"{pages}/second")
    return {"nav": nav, "snap": snap, "click": click, "second": second}


def db(router: RouterThread) -> sqlite3.Connection:
    wait_recorded(router)  # a session's events follow the answers' commits
    conn = sqlite3.connect(router.settings.state_dir / "router.db")
    conn.row_factory = sqlite3.Row
    return conn


def test_every_table_is_filled_by_a_real_flow(pw_router: RouterThread, pages: str) -> None:
    with RawClient(pw_router.url) as c:
        c.initialize(name="recording-test")
        answers = flow(c, pages)
        click_ref = ref_of(answers["click"])
        with db(pw_router) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            session = conn.execute("SELECT * FROM sessions WHERE id = ?", (c.session_id,)).fetchone()
            assert json.loads(session["client_info"])["name"] == "recording-test"
            assert session["worker_port"] and session["worker_pid"]
            methods = [r["method"] for r in conn.execute(
                "SELECT method FROM requests WHERE session_id = ? ORDER BY ts", (c.session_id,))]
            assert methods[0] == "initialize" and methods.count("tools/call") == 4
            response = conn.execute("SELECT * FROM responses WHERE ref_id = ?", (click_ref,)).fetchone()
            assert response["status"] == "success"
            # The click answer only links to page-*.yml; the router read the file into the record.
            assert "Clicked" in response["page_snapshot"]
            assert json.loads(response["result"])["content"][0]["type"] == "text"
            logs = conn.execute("SELECT level, message FROM console_logs WHERE ref_id = ?", (click_ref,)).fetchall()
            assert ("error", "clicked-error") in {(r["level"], r["message"].split(" @ ")[0]) for r in logs}
        c.delete()


def test_an_answer_is_kept_as_the_client_got_it(pw_router: RouterThread, pages: str) -> None:
    """Parsed once and encoded once: the record keeps the result the client got, its refId
    included, non-ASCII text as it is (escaped, each character took up to six bytes) and compact
    separators. What the session learns from it (the page URL) is known as it leaves."""
    with RawClient(pw_router.url) as c:
        c.initialize()
        c.call("browser_navigate", url=f"{pages}/accents")
        snap = c.call("browser_snapshot")
        assert "L’élève a écrit « déjà vu » — 東京" in text_of(snap)
        assert pw_router.manager.sessions.get(c.session_id).current_url == f"{pages}/accents"
        with db(pw_router) as conn:
            stored = conn.execute("SELECT result FROM responses WHERE ref_id = ?", (ref_of(snap),)).fetchone()[0]
        assert "L’élève a écrit « déjà vu » — 東京" in stored and "\\u00e9" not in stored
        assert '", "' not in stored and stored.startswith('{"content":[')
        assert json.loads(stored) == snap["result"]
        c.delete()


def test_a_snapshot_is_on_its_row_when_the_answer_arrives(pw_router: RouterThread, pages: str) -> None:
    # In the answer's text, or in the page-*.yml file it links: either way it is written with the
    # row (in the commit the answer waited for), not read onto it afterwards.
    with RawClient(pw_router.url) as c:
        c.initialize()
        reads = scrape(pw_router).value("mcp_router_recorder_linked_reads")
        nav = c.call("browser_navigate", url=f"{pages}/")
        with db(pw_router) as conn:
            row = conn.execute("SELECT page_snapshot FROM responses WHERE ref_id = ?", (ref_of(nav),)).fetchone()
        assert "[Snapshot](" in text_of(nav)
        assert row is not None and "Click me" in row["page_snapshot"]
        snap = c.call("browser_snapshot")
        with db(pw_router) as conn:
            row = conn.execute("SELECT page_snapshot FROM responses WHERE ref_id = ?", (ref_of(snap),)).fetchone()
        assert "```yaml" in text_of(snap)
        assert row is not None and "Click me" in row["page_snapshot"]
        assert scrape(pw_router).value("mcp_router_recorder_linked_reads") == reads  # nothing read later
        c.call("browser_take_screenshot")  # an image and a file to keep: those are for the writer thread
        assert scrape(pw_router).value("mcp_router_recorder_linked_reads") == reads + 1  # queued by its commit
        c.delete()


def test_get_content_whole_then_diff_then_empty(pw_router: RouterThread, pages: str) -> None:
    with RawClient(pw_router.url) as c:
        c.initialize()
        answers = flow(c, pages)
        nav, click = ref_of(answers["nav"]), ref_of(answers["click"])
        first = text_of(c.call("get_content", ref_id=click))
        assert "Clicked" in first and "Router test page" in first
        assert text_of(c.call("get_content", ref_id=click)) == ""  # nothing changed since the last read
        assert text_of(c.call("get_content", ref_id=click, reset_cursor=True)) == first
        diff = text_of(c.call("get_content", ref_id=click, since_ref=nav))
        assert "Clicked" in diff and "Click me" in diff
        found = text_of(c.call("get_content", ref_id=click, search_for="Second page"))
        assert "Second page" in found and "Clicked" not in found
        console = text_of(c.call("get_console_content", ref_id=click, level="error"))
        assert "clicked-error" in console
        c.delete()


def test_foreign_ref_is_refused(pw_router: RouterThread, pages: str) -> None:
    with RawClient(pw_router.url) as a, RawClient(pw_router.url) as b:
        a.initialize()
        b.initialize()
        ref = ref_of(a.call("browser_navigate", url=f"{pages}/"))
        stolen = b.call("get_content", ref_id=ref)
        assert stolen["result"]["isError"] is True
        assert "Router test page" not in text_of(stolen)
        a.delete()
        b.delete()


def test_compact_mode_shrinks_answers_and_keeps_snapshots_whole(pw_router: RouterThread, pages: str) -> None:
    sizes: dict[str, int] = {}
    for mode in ("full", "compact"):
        with RawClient(pw_router.url + f"?responses={mode}") as c:
            c.initialize()
            answers = flow(c, pages)
            sizes[mode] = sum(len(text_of(a)) for a in answers.values())
            if mode == "compact":
                nav = text_of(answers["nav"])
                assert "get_content" in nav and "title: Home" in nav and "ref_id:" in nav
                assert "Router test page" in text_of(answers["snap"])  # browser_snapshot stays whole
                ref = nav.split("ref_id: ")[1].split("\n")[0]
                assert "Router test page" in text_of(c.call("get_content", ref_id=ref))
            c.delete()
    assert sizes["compact"] < sizes["full"]


def test_cli_reads_the_record(pw_router: RouterThread, pages: str) -> None:
    state = str(pw_router.settings.state_dir)
    with RawClient(pw_router.url) as c:
        c.initialize(name="cli-test")
        c.call("browser_navigate", url=f"{pages}/")
        sid = c.session_id or ""
        c.delete()
    sessions = run_cli("sessions", "--state-dir", state)
    assert sessions.returncode == 0, sessions.stderr
    assert sid in sessions.stdout and "cli-test" in sessions.stdout
    show = run_cli("show", sid, "--state-dir", state)
    assert show.returncode == 0 and "browser_navigate" in show.stdout
    export = run_cli("export", sid, "--state-dir", state)
    lines = [json.loads(line) for line in export.stdout.splitlines()]
    assert lines[0]["type"] == "session" and any(line.get("tool") == "browser_navigate" for line in lines[1:])
    missing = run_cli("show", "nope", "--state-dir", state)
    assert missing.returncode == 1


def test_record_survives_for_ended_sessions(pw_router: RouterThread, pages: str) -> None:
    with RawClient(pw_router.url) as c:
        c.initialize()
        ref = ref_of(c.call("browser_navigate", url=f"{pages}/"))
        assert c.delete().status_code == 200
    assert not (pw_router.settings.state_dir / "sessions" / (c.session_id or "")).exists()
    with db(pw_router) as conn:
        session = conn.execute("SELECT state FROM sessions WHERE id = ?", (c.session_id,)).fetchone()
        call = conn.execute("SELECT tool FROM requests WHERE ref_id = ?", (ref,)).fetchone()
    assert session["state"] == "closed"
    assert call["tool"] == "browser_navigate"


def test_create_new_session_gives_a_fresh_browser_linked_in_the_record(pw_router: RouterThread, pages: str) -> None:
    with RawClient(pw_router.url) as c:
        c.initialize()
        before = c.call("browser_navigate", url=f"{pages}/set?v=old")
        assert "set old" in text_of(before)
        old_pid = pw_router.manager.sessions.get(c.session_id).connection.worker.pid
        renewed = c.call("create_new_session")
        assert renewed["result"].get("isError") is not True, renewed
        browser_session = text_of(renewed).rsplit(" ", 1)[-1]
        new_pid = pw_router.manager.sessions.get(c.session_id).connection.worker.pid
        assert new_pid != old_pid
        after = text_of(c.call("browser_navigate", url=f"{pages}/get"))
        assert "cookie=none storage=none" in after, after
        # The earlier call's record is still this conversation's.
        assert "set old" in text_of(c.call("get_content", ref_id=ref_of(before)))
        with db(pw_router) as conn:
            row = conn.execute("SELECT parent_id FROM sessions WHERE id = ?", (browser_session,)).fetchone()
        assert row is not None and row["parent_id"] == c.session_id
        c.delete()
