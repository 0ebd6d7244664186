// The floor's bare relay in Node: what relaying costs outside Python (floor.py, the latency rounds).
// Forwards each request to 127.0.0.1:FLOOR_UPSTREAM_PORT over a kept-alive socket with the MCP
// headers, and relays the status, the MCP headers and the body back. Nothing else: no sessions,
// no security, no record. Usage: node node_relay.js PORT (FLOOR_UPSTREAM_PORT in the environment).
"use strict";
const http = require("node:http");

const upstreamPort = Number(process.env.FLOOR_UPSTREAM_PORT);
const forwarded = ["content-type", "accept", "mcp-session-id", "mcp-protocol-version"];
const returned = ["content-type", "cache-control", "mcp-session-id"];
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
const host = `localhost:${upstreamPort}`; // a worker accepts its own Host only

http
  .createServer((req, res) => {
    const headers = { host };
    for (const name of forwarded) if (req.headers[name] !== undefined) headers[name] = req.headers[name];
    const up = http.request(
      { host: "127.0.0.1", port: upstreamPort, path: "/mcp", method: req.method, headers, agent },
      (answer) => {
        const back = {};
        for (const name of returned) if (answer.headers[name] !== undefined) back[name] = answer.headers[name];
        res.writeHead(answer.statusCode, back);
        answer.pipe(res);
      },
    );
    up.on("error", (err) => {
      res.writeHead(502, { "content-type": "text/plain" });
      res.end(String(err));
    });
    req.pipe(up);
  })
  .listen(Number(process.argv[2]), "127.0.0.1");
