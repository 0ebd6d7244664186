"""The local test page the browsers load: served from a thread on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ROWS = "\n".join(f'<li><a href="/item/{i}">Item {i}</a> <span>price {i * 3} EUR</span></li>' for i in range(30))
HOME = f"""<!doctype html><html><head><title>Bench home</title></head><body>
<h1>mcp-router benchmark page</h1>
<p id="out">Not clicked</p>
<button id="b" onclick="document.getElementById('out').textContent='Clicked'">Press me</button>
<form><label>Name <input name="n"></label> <label>Mail <input name="m" type="email"></label></form>
<ul>
{_ROWS}
</ul>
</body></html>""".encode()


def _item(n: str) -> bytes:
    return f"""<!doctype html><html><head><title>Item {n}</title></head><body>
<h1>Item {n}</h1><p>Details of item {n}.</p><a href="/">Home</a></body></html>""".encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/":
            data = HOME
        elif path.startswith("/item/"):
            data = _item(path.rsplit("/", 1)[1])
        else:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve_page() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
