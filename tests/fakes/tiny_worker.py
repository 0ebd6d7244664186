"""The lightest stand-in worker: stdlib only, starts in ~20 ms, for soak tests with many spawns.

Run as `python -S tiny_worker.py PORT`. Speaks just enough Streamable HTTP (JSON answers only):
initialize (issues a session id), notifications (202), tools/list, tools/call echo, DELETE.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

TOOLS = [{"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]


def answer(message: dict[str, Any]) -> dict[str, Any]:
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny-worker", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        text = str((params.get("arguments") or {}).get("text", ""))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        return {"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": message.get("id"), "result": result}


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method = lines[0].split(" ")[0]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            status, extra, payload = "405 Method Not Allowed", "", b""
            if method == "POST":
                message = json.loads(body)
                if "id" not in message:
                    status = "202 Accepted"
                else:
                    status = "200 OK"
                    payload = json.dumps(answer(message)).encode()
                    extra = "content-type: application/json\r\n"
                    if message.get("method") == "initialize":
                        extra += f"mcp-session-id: {uuid.uuid4().hex}\r\n"
            elif method == "DELETE":
                status = "200 OK"
            writer.write(f"HTTP/1.1 {status}\r\n{extra}content-length: {len(payload)}\r\n\r\n".encode() + payload)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
