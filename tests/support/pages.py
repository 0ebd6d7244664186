"""The one page server: the pages the end-to-end tests serve on 127.0.0.1 for the real browser."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

PAGES: dict[str, str | bytes] = {
    "/": """<!doctype html><html><head><title>Home</title></head><body>
<h1>Router test page</h1>
<button id="b" onclick="console.error('clicked-error'); this.textContent='Clicked'">Click me</button>
<a href="/second">Second page</a>
</body></html>""",
    "/second": """<!doctype html><html><head><title>Second</title></head><body>
<p>This is the second page</p></body></html>""",
    "/set": """<!doctype html><html><head><title>Set</title></head><body><p id="out">setting</p>
<script>
const v = new URLSearchParams(location.search).get('v');
document.cookie = 'token=' + v + '; path=/';
localStorage.setItem('k', v);
document.title = 'set ' + v;
document.getElementById('out').textContent = 'set ' + v;
</script></body></html>""",
    "/get": """<!doctype html><html><head><title>Get</title></head><body><p id="out"></p>
<script>
const c = document.cookie.match(/token=([^;]*)/);
const l = localStorage.getItem('k');
document.getElementById('out').textContent = 'cookie=' + (c ? c[1] : 'none') + ' storage=' + (l || 'none');
document.title = 'cookie=' + (c ? c[1] : 'none') + ' storage=' + (l || 'none');
</script></body></html>""",
    # The recorder's real flow: a console error on load, a console warning on click.
    "/recorder": """<!doctype html><title>Recorder e2e</title><h1>Hello</h1>
<button onclick="document.getElementById('o').textContent='Clicked'; console.warn('clicked warn')">
Press</button>
<p id="o">Not clicked</p><script>console.error('boom from page')</script>""",
    "/workers": "<!doctype html><title>workers e2e</title><h1>hello from the test</h1>",
    # What localStorage held as each load of this tab began, logged in sessionStorage (which no
    # saved state holds): a resume that put storage back after the page first loaded shows "none".
    "/loads": """<!doctype html><html><head><title>Loads</title></head><body><button>Again</button>
<p id="out"></p><script>
sessionStorage.setItem('loads', (sessionStorage.getItem('loads') || '') + (localStorage.getItem('k') || 'none') + ';');
document.getElementById('out').textContent = 'loads: ' + sessionStorage.getItem('loads');
</script></body></html>""",
    "/favicon.ico": "",
    # A signed-in app, in one navigation (refs from a later navigation of the same tab carry a
    # frame prefix, f1e3): ?login=V sets the session cookie (no expiry) and leaves the URL as
    # /app, so reloading the page never sets the cookie again. The button shows the cookies.
    "/app": """<!doctype html><html><head><title>App</title></head><body>
<h1>Signed-in app</h1>
<button id="go" onclick="go()">Continue</button>
<p id="out">not yet</p>
<script>
const v = new URLSearchParams(location.search).get('login');
if (v) { document.cookie = 'session=' + v + '; path=/'; history.replaceState(null, '', '/app'); }
function go() { document.getElementById('out').textContent = 'continued with ' + document.cookie; }
</script></body></html>""",
    # A login whose redirect lands a moment later (while the client waits, say): the cookie is
    # set and the page moves to /second 3 s after it loaded.
    # One colour edge to edge: a picture of it says which page it shows.
    "/red": """<!doctype html><html><head><title>All red</title></head>
<body style="margin:0;background:#e00000;height:100vh"></body></html>""",
    "/accents": """<!doctype html><html><head><meta charset="utf-8"><title>Accents</title></head><body>
<p>L’élève a écrit « déjà vu » — 東京</p></body></html>""",
    "/later": """<!doctype html><html><head><title>Later</title></head><body><p>signing in</p>
<script>setTimeout(() => { document.cookie = 'late=moved42; path=/'; location.href = '/second'; }, 3000);</script>
</body></html>""",
}
PAGE_SERVER_STOP_TIMEOUT = 5.0
REDIRECT_PATH = "/redirect"


def _handler(pages: dict[str, str | bytes]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if path == REDIRECT_PATH:  # /redirect?to=URL: a page that sends the browser on (302)
                self.send_response(302)
                self.send_header("location", parse_qs(query).get("to", ["/"])[0])
                self.send_header("content-length", "0")
                self.end_headers()
                return
            body = pages.get(path)
            if body is None:
                self.send_error(404)
                return
            data = body.encode() if isinstance(body, str) else body
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serve_pages(pages: dict[str, str | bytes] | None = None) -> Iterator[str]:
    """Serves ``pages`` (path → HTML; default: the shared test pages) on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(dict(PAGES) if pages is None else pages))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=PAGE_SERVER_STOP_TIMEOUT)
