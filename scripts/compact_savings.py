"""Measures what compact answers save on a realistic browsing flow (characters ≈ tokens × 4).

Usage: .venv/bin/python scripts/compact_savings.py
Starts a router (real @playwright/mcp workers) and a local multi-section page, runs the same flow
in `full` and `compact` mode, and prints a Markdown table.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from workers.ports import spare_port

ACCEPT = "application/json, text/event-stream"

ROWS = "".join(
    f"<tr><td>Item {i}</td><td><a href='/item/{i}'>details {i}</a></td><td>{i * 7}</td></tr>" for i in range(60)
)
PAGE = f"""<!doctype html><html><head><title>Shop</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About</a> <a href="/contact">Contact</a></nav>
<h1>Catalogue</h1><form><label>Search <input name=q></label><button type=button
onclick="console.warn('searching'); document.getElementById('r').textContent='Results for '+this.form.q.value"
>Go</button></form>
<p id=r></p><table>{ROWS}</table><footer>© shop</footer></body></html>"""


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def call(
    http: httpx.Client, url: str, sid: str, n: int, method: str, params: dict[str, Any]
) -> dict[str, Any]:
    headers = {"content-type": "application/json", "accept": ACCEPT, "mcp-session-id": sid}
    r = http.post(url, json={"jsonrpc": "2.0", "id": n, "method": method, "params": params}, headers=headers)
    for line in r.text.splitlines():
        if line.startswith("data: "):
            msg = json.loads(line[6:])
            if msg.get("id") == n:
                return dict(msg)
    return dict(r.json())


def run_flow(base: str, page: str, mode: str) -> tuple[int, int]:
    url = f"{base}?responses={mode}"
    with httpx.Client(timeout=60) as http:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "savings", "version": "1"}}
        r = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                      headers={"content-type": "application/json", "accept": "application/json, text/event-stream"})
        sid = r.headers["mcp-session-id"]
        total = 0
        steps: list[tuple[str, dict[str, Any]]] = [("browser_navigate", {"url": page})]
        n = 2
        for name, args in [*steps, ("browser_snapshot", {})]:
            answer = call(http, url, sid, n, "tools/call", {"name": name, "arguments": args})
            n += 1
            text = "".join(p.get("text", "") for p in answer["result"]["content"])
            if name == "browser_snapshot":
                snapshot = text
            else:
                total += len(text)
        ref = re.search(r"textbox \"Search\" \[ref=(e\d+)\]", snapshot)
        button = re.search(r"button \"Go\" \[ref=(e\d+)\]", snapshot)
        assert ref and button, snapshot[:500]
        for name, args in [
            ("browser_type", {"target": ref.group(1), "element": "Search", "text": "item 42"}),
            ("browser_click", {"target": button.group(1), "element": "Go"}),
            ("browser_navigate", {"url": page + "?page=2"}),
            ("browser_click", {"target": button.group(1), "element": "Go"}),
        ]:
            answer = call(http, url, sid, n, "tools/call", {"name": name, "arguments": args})
            n += 1
            total += len("".join(p.get("text", "") for p in answer["result"]["content"]))
        http.delete(base, headers={"mcp-session-id": sid})
        return total, len(snapshot)


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = f"http://127.0.0.1:{server.server_address[1]}/"
    port = spare_port()
    with tempfile.TemporaryDirectory() as state:
        router = subprocess.Popen(
            [sys.executable, "-m", "router.cli", "serve", "--port", str(port), "--state-dir", state],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}/mcp"
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            full = run_flow(base, page, "full")
            compact = run_flow(base, page, "compact")
        finally:
            os.killpg(router.pid, signal.SIGTERM)
            router.wait(timeout=20)
    print("| flow: navigate, snapshot, type, click, navigate, click | full | compact | saving |")
    print("|---|---|---|---|")
    saving = 100 * (full[0] - compact[0]) / full[0]
    print(f"| the 5 action answers (characters) | {full[0]} | {compact[0]} | {saving:.0f}% |")
    print(f"| browser_snapshot (kept whole) | {full[1]} | {compact[1]} | 0% |")
    tf, tc = sum(full), sum(compact)
    print(f"| whole flow | {tf} | {tc} | {100 * (tf - tc) / tf:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
