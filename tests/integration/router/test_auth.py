"""The token at the door: every route but /healthz asks for it, by header, query or (dashboard) cookie."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.http.app import create_app
from router.http.auth import (
    LOGIN_PATH,
    AuthMiddleware,
    TokenAuth,
    WeakToken,
    bind_problem,
    cookie_name,
    load_or_create_token,
    read_token,
)
from router.settings import Settings
from tests.support import (
    ROOT,
    TEST_TOKEN,
    RawClient,
    RouterThread,
    auth_headers,
    initialize_body,
    router_settings,
    spare_port,
)

# Every route a client could reach; none may answer without the token.
GUARDED = [
    ("POST", "/mcp"),
    ("GET", "/mcp"),
    ("DELETE", "/mcp"),
    ("GET", "/api/sessions"),
    ("GET", "/api/sessions/abc"),
    ("POST", "/api/sessions/abc/end"),
    ("POST", "/api/sessions/abc/hibernate"),
    ("GET", "/api/calls/abc"),
    ("GET", "/api/calls/abc/images/0"),
    ("GET", "/metrics"),
    ("GET", "/ui/app.js"),
    ("GET", "/ui/nope.js"),
    ("GET", "/no-such-route"),
]
UI_DOCUMENTS = ["/ui", "/ui/", "/ui/index.html"]


def send(router: RouterThread, method: str, path: str, **headers: str) -> httpx.Response:
    body = initialize_body() if (method, path) == ("POST", "/mcp") else None
    return httpx.request(
        method,
        f"http://127.0.0.1:{router.port}{path}",
        json=body,
        headers={"accept": "application/json, text/event-stream", **headers},
        timeout=10,
        trust_env=False,
    )


def assert_401(response: httpx.Response, *, invalid: bool) -> None:
    assert response.status_code == 401, (response.request.url, response.text)
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert ('error="invalid_token"' in challenge) is invalid
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == -32600 and body["error"]["message"]
    assert TEST_TOKEN not in response.text


@pytest.mark.parametrize(("method", "path"), GUARDED)
def test_no_token_wrong_token_and_the_right_one(fake_router: RouterThread, method: str, path: str) -> None:
    assert_401(send(fake_router, method, path), invalid=False)
    assert_401(send(fake_router, method, path, authorization="Bearer " + "x" * len(TEST_TOKEN)), invalid=True)
    assert_401(send(fake_router, method, path, authorization=f"Basic {TEST_TOKEN}"), invalid=True)
    assert_401(send(fake_router, method, f"{path}?token=wrong"), invalid=True)
    assert send(fake_router, method, path, **auth_headers()).status_code != 401
    assert send(fake_router, method, path, authorization=f"bearer {TEST_TOKEN}").status_code != 401
    assert send(fake_router, method, f"{path}?token={TEST_TOKEN}").status_code != 401


def test_dashboard_documents_send_a_browser_to_the_login_form(fake_router: RouterThread) -> None:
    for path in UI_DOCUMENTS:
        answer = send(fake_router, "GET", path)
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"
        assert send(fake_router, "GET", path, **auth_headers()).status_code in (200, 308)
    login = send(fake_router, "GET", "/ui/login")
    assert login.status_code == 200 and '<script src="login.js">' in login.text
    assert "content-security-policy" in login.headers
    assert send(fake_router, "GET", "/ui/login.js").status_code == 200


def test_healthz_is_open_but_tells_details_only_to_the_token(fake_router: RouterThread) -> None:
    assert send(fake_router, "GET", "/healthz").json() == {"status": "ok"}
    assert send(fake_router, "GET", "/healthz", authorization="Bearer wrong").json() == {"status": "ok"}
    detailed = send(fake_router, "GET", "/healthz", **auth_headers()).json()
    assert detailed["status"] == "ok" and "sessions" in detailed and "workers" in detailed


def test_a_whole_session_with_the_token_in_the_query(fake_router: RouterThread) -> None:
    with RawClient(f"{fake_router.url}?token={TEST_TOKEN}", token=None) as c:
        c.initialize()
        assert c.text("echo", text="by query") == "by query"
        assert c.delete().status_code in (200, 204)


def test_login_sets_a_strict_httponly_cookie_good_for_ui_and_api_only(fake_router: RouterThread) -> None:
    base = f"http://127.0.0.1:{fake_router.port}"
    wrong = httpx.post(f"{base}/ui/login", json={"token": "nope"}, trust_env=False)
    assert_401(wrong, invalid=True)
    assert "set-cookie" not in wrong.headers
    for junk in (b"not json", b"[]", b'{"token": 5}'):
        assert httpx.post(f"{base}/ui/login", content=junk, trust_env=False).status_code == 401
    assert httpx.post(f"{base}/ui/login", content=b"x" * 10_000, trust_env=False).status_code == 400
    ok = httpx.post(f"{base}/ui/login", json={"token": TEST_TOKEN}, trust_env=False)
    assert ok.status_code == 204
    cookie = ok.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/"):
        assert attribute.lower() in cookie.lower()
    name = cookie_name(fake_router.port)
    value = ok.cookies[name]
    assert TEST_TOKEN not in value
    jar = {"cookie": f"other=1; {name}={value}"}
    assert send(fake_router, "GET", "/api/sessions", **jar).status_code == 200
    assert send(fake_router, "GET", "/ui/app.js", **jar).status_code == 200
    for method, path in (("POST", "/mcp"), ("GET", "/metrics")):
        assert_401(send(fake_router, method, path, **jar), invalid=False)
    assert_401(send(fake_router, "GET", "/api/sessions", cookie=f"{name}=forged"), invalid=True)


def test_the_hostile_host_and_origin_checks_still_come_first(fake_router: RouterThread) -> None:
    assert send(fake_router, "POST", "/mcp", host="evil.example").status_code == 421
    assert send(fake_router, "POST", "/mcp", origin="http://evil.example", **auth_headers()).status_code == 403


async def test_credentials_never_travel_further() -> None:
    """What the app behind the middleware sees: no Authorization, no token param, no our-cookie."""
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)

    middleware = AuthMiddleware(app, TokenAuth(TEST_TOKEN, port=4000))
    cookie = f"a=1; {cookie_name(4000)}=x; b=2"
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "query_string": f"responses=compact&token={TEST_TOKEN}&x=a+b".encode(),
        "headers": [(b"authorization", f"Bearer {TEST_TOKEN}".encode()), (b"cookie", cookie.encode())],
    }
    await middleware(scope, None, None)
    (inner,) = seen
    assert inner["query_string"] == b"responses=compact&x=a+b"
    assert inner["headers"] == [(b"cookie", b"a=1; b=2")]
    assert inner["state"]["authenticated"] is True


def test_query_token_is_not_in_the_access_log(
    state_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `serve` keeps no access log; one an operator turns on must not hold the token either. (A
    # server without one stops the logger propagating, for the whole process: undone here.)
    monkeypatch.setattr(logging.getLogger("uvicorn.access"), "propagate", True)
    settings = router_settings(state_dir)
    with caplog.at_level(logging.INFO, logger="uvicorn.access"), RouterThread(settings, access_log=True) as router:
        assert httpx.get(f"http://127.0.0.1:{router.port}/metrics?token={TEST_TOKEN}&a=1").status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert any("/metrics" in line for line in lines), lines
    assert not any(TEST_TOKEN in line for line in lines)


# -- the token file and the bind rule ------------------------------------------------------------


def test_first_start_makes_a_private_token_and_later_starts_keep_it(tmp_path: Path) -> None:
    state = tmp_path / "fresh"
    settings = Settings(state_dir=state, port=spare_port(), record=False)
    create_app(settings)
    token = read_token(state)
    assert token is not None and len(token) >= 43  # 32 random bytes, url-safe base64
    assert stat.S_IMODE((state / "token").stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    create_app(settings)
    assert read_token(state) == token


def test_a_loose_state_dir_and_token_file_are_made_private(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    load_or_create_token(tmp_path)
    (tmp_path / "token").chmod(0o644)
    create_app(Settings(state_dir=tmp_path, port=spare_port(), record=False))
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o600


def test_racing_first_starts_agree_on_one_token(tmp_path: Path) -> None:
    tokens: list[str] = []
    threads = [threading.Thread(target=lambda: tokens.append(load_or_create_token(tmp_path))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(tokens) == 8 and len(set(tokens)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["token"]  # no temp file left behind


def test_a_weak_token_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("short\n")
    with pytest.raises(WeakToken):
        create_app(Settings(state_dir=tmp_path, port=spare_port(), record=False))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_auth_none_is_fine_on_loopback(host: str) -> None:
    assert bind_problem(host, "none") is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.168.1.5", "example.com"])
def test_auth_none_refuses_any_other_bind(host: str) -> None:
    problem = bind_problem(host, "none")
    assert problem is not None and "loopback" in problem
    assert bind_problem(host, "token") is None
    with pytest.raises(ValueError, match="loopback"):
        create_app(Settings(host=host, auth="none", state_dir=Path("/nonexistent/never-made"), record=False))


def test_auth_none_opens_mcp_but_not_the_dashboard(state_dir: Path) -> None:
    with RouterThread(router_settings(state_dir, auth="none")) as router, RawClient(router.url, token=None) as c:
        base = f"http://127.0.0.1:{router.port}"
        c.initialize()
        assert c.text("echo", text="open") == "open"
        assert httpx.get(f"{base}/metrics").status_code == 200
        assert "sessions" in httpx.get(f"{base}/healthz").json()
        # The records stay behind the token: a page can lead the model here by a redirect.
        for path in ("/api/sessions", f"/api/sessions/{c.session_id}"):
            refused = httpx.get(f"{base}{path}")
            assert refused.status_code == 401 and refused.json()["error"]["message"] == "a token is required"
        assert httpx.get(f"{base}/ui/", follow_redirects=False).headers["location"] == LOGIN_PATH
        assert httpx.get(f"{base}/api/sessions", headers=auth_headers(TEST_TOKEN)).status_code == 200
        c.delete()


def mcp_router(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "router.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_serve_refuses_auth_none_on_a_public_bind(tmp_path: Path) -> None:
    result = mcp_router("serve", "--host", "0.0.0.0", "--auth", "none", "--state-dir", str(tmp_path))
    assert result.returncode == 2
    assert "refusing to start" in result.stderr and "loopback" in result.stderr
    assert not (tmp_path / "token").exists() and not (tmp_path / "router.db").exists()  # touched nothing


def test_token_command_prints_it_creating_it_if_needed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = mcp_router("token", "--state-dir", str(state))
    assert first.returncode == 0, first.stderr
    token = first.stdout.strip()
    assert token == read_token(state)
    assert stat.S_IMODE((state / "token").stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    again = mcp_router("token", "--state-dir", str(state), "--log-level", "debug")  # any serve flag is fine
    assert again.stdout.strip() == token
    connect = mcp_router("token", "--connect", "--state-dir", str(state), "--port", "4100")
    expected = (
        "claude mcp add --transport http browser http://127.0.0.1:4100/mcp "
        f'--header "Authorization: Bearer {token}"'
    )
    assert expected in connect.stdout.splitlines()[1]
    assert f"http://127.0.0.1:4100/ui/login#token={token}" in connect.stdout
