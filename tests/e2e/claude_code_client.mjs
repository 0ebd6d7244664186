// A client shaped like Claude Code 2.1.328 on the wire, built on the TypeScript MCP SDK and driven
// by a test over stdin/stdout, one JSON object a line.
//
// Usage: node claude_code_client.mjs SDK_DIST_DIR MCP_URL   (bearer token, if any: env CC_TOKEN)
//
// What it does like Claude Code: POSTs `server/discover` with MCP-Protocol-Version 2026-07-28 and
// falls back to initialize on a 4xx; initializes with protocol 2025-11-25 and the capabilities
// {"roots":{"listChanged":true},"elicitation":{"form":{},"url":{}}}; opens the GET stream right
// after notifications/initialized and reopens it ~1 s after it ends, forever, without
// Last-Event-ID (the SDK sends one only if the server gave event ids); answers roots/list and
// pings; lists tools again on notifications/tools/list_changed; never sends DELETE; no tool-call
// timeout of its own beyond what the test asks for.
//
// First line out: {"ready":true,...} or {"fatal":"..."}. Then, per command line in
// {"id":N,"cmd":"call","name":...,"arguments":{...},"timeout_ms":...} | {"id":N,"cmd":"list_tools"}
// | {"id":N,"cmd":"status"} | {"id":N,"cmd":"quit"}, one answer line {"id":N,"ok":true|false,...}.
// Commands run concurrently: a status can be asked while a call is in flight.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { createInterface } from "node:readline";

const [sdkDist, mcpUrl] = process.argv.slice(2);
const load = (rel) => import(pathToFileURL(join(sdkDist, "esm", rel)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const { ListRootsRequestSchema, ToolListChangedNotificationSchema, LATEST_PROTOCOL_VERSION } = await load("types.js");

const CAPABILITIES = { roots: { listChanged: true }, elicitation: { form: {}, url: {} } };
const ROOTS = [{ uri: "file:///tmp/cc-project", name: "project" }];
const DISCOVER_VERSION = "2026-07-28";
const DEFAULT_TIMEOUT_MS = 120_000;
const MAX_EVENTS = 400;
// Claude Code reopens an ended GET stream after ~1 s and keeps trying.
const RECONNECT = {
  initialReconnectionDelay: 1000,
  maxReconnectionDelay: 1000,
  reconnectionDelayGrowFactor: 1,
  maxRetries: Number.POSITIVE_INFINITY,
};

const started = Date.now();
const stats = {
  discover_status: null,
  discover_error_code: null,
  pings_answered: 0,
  roots_list_answered: 0,
  // Server→client requests by method and by the stream that carried them ("get" or "post").
  requests_seen: {},
  get_opens: 0,
  get_open_statuses: [],
  get_stream_open: false,
  get_last_event_ids_sent: 0,
  deletes: 0,
  tools_list_changed: 0,
  errors: [],
  events: [],
};

function event(kind, detail = {}) {
  stats.events.push({ t: Date.now() - started, kind, ...detail });
  if (stats.events.length > MAX_EVENTS) stats.events.splice(0, stats.events.length - MAX_EVENTS);
}

function seen(method, via) {
  const key = `${method}@${via}`;
  stats.requests_seen[key] = (stats.requests_seen[key] ?? 0) + 1;
}

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

// Reads the SSE events passing through a response body, without consuming them.
function tapSse(body, via, onEnd) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const tap = (chunk) => {
    buffer = (buffer + decoder.decode(chunk, { stream: true })).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
      if (!data.length) continue;
      try {
        const msg = JSON.parse(data.join("\n"));
        if (msg.method && msg.id !== undefined) {
          seen(msg.method, via);
          event("server_request", { method: msg.method, id: msg.id, via });
        }
      } catch {
        // not JSON: the SDK reports it; nothing to count
      }
    }
  };
  return new ReadableStream({
    async pull(controller) {
      try {
        const { value, done } = await reader.read();
        if (done) {
          onEnd("end");
          controller.close();
          return;
        }
        tap(value);
        controller.enqueue(value);
      } catch (error) {
        onEnd(`error: ${error?.message ?? error}`);
        controller.error(error);
      }
    },
    cancel(reason) {
      onEnd("cancel");
      return reader.cancel(reason);
    },
  });
}

function headerOf(init, name) {
  const h = new Headers(init?.headers ?? {});
  return h.get(name);
}

async function tappingFetch(url, init) {
  const method = (init?.method ?? "GET").toUpperCase();
  if (method === "DELETE") stats.deletes += 1;
  if (method === "GET") {
    stats.get_opens += 1;
    if (headerOf(init, "last-event-id")) stats.get_last_event_ids_sent += 1;
    event("get_request");
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (error) {
    if (method === "GET") event("get_failed", { error: String(error?.cause?.code ?? error?.message ?? error) });
    throw error;
  }
  const type = response.headers.get("content-type") ?? "";
  if (method === "GET") {
    stats.get_open_statuses.push(response.status);
    event("get_response", { status: response.status });
  }
  if (!response.body || response.status !== 200 || !type.startsWith("text/event-stream")) return response;
  let ended = false;
  const via = method === "GET" ? "get" : "post";
  if (via === "get") stats.get_stream_open = true;
  const body = tapSse(response.body, via, (how) => {
    if (ended) return;
    ended = true;
    if (via === "get") {
      stats.get_stream_open = false;
      event("get_end", { how });
    }
  });
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
}

// Stands between the SDK's Protocol and the transport, to count what the client answers.
class CountingTransport {
  constructor(inner) {
    this.inner = inner;
    this.pending = new Map(); // server request id → method
    inner.onclose = () => this.onclose?.();
    inner.onerror = (error) => {
      stats.errors.push(String(error?.message ?? error).slice(0, 300));
      if (stats.errors.length > 50) stats.errors.shift();
      this.onerror?.(error);
    };
    inner.onmessage = (message, extra) => {
      if (message.method && message.id !== undefined) this.pending.set(message.id, message.method);
      this.onmessage?.(message, extra);
    };
  }
  get sessionId() {
    return this.inner.sessionId;
  }
  setProtocolVersion(version) {
    this.inner.setProtocolVersion(version);
  }
  start() {
    return this.inner.start();
  }
  close() {
    return this.inner.close();
  }
  async send(message, options) {
    const answering = message.method === undefined && message.id !== undefined ? this.pending.get(message.id) : undefined;
    await this.inner.send(message, options);
    if (answering !== undefined) {
      this.pending.delete(message.id);
      if (answering === "ping") stats.pings_answered += 1;
      if (answering === "roots/list") stats.roots_list_answered += 1;
      event("answered", { method: answering, id: message.id, error: message.error !== undefined });
    }
  }
}

const extraHeaders = process.env.CC_TOKEN ? { authorization: `Bearer ${process.env.CC_TOKEN}` } : {};
// The conversation it continues (what mcp-router stdio sends from CLAUDE_CODE_SESSION_ID).
if (process.env.CC_CONVERSATION) extraHeaders["mcp-router-conversation"] = process.env.CC_CONVERSATION;

async function discover() {
  // Clients of late 2026 probe the sessionless revision first and fall back on a 4xx.
  const response = await fetch(mcpUrl, {
    method: "POST",
    headers: {
      ...extraHeaders,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": DISCOVER_VERSION,
      "mcp-method": "server/discover",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 0, method: "server/discover", params: {} }),
  });
  stats.discover_status = response.status;
  const text = await response.text();
  try {
    stats.discover_error_code = JSON.parse(text)?.error?.code ?? null;
  } catch {
    stats.discover_error_code = null;
  }
  event("discover", { status: response.status, code: stats.discover_error_code });
}

const client = new Client({ name: "claude-code", version: "2.1.328" }, { capabilities: CAPABILITIES });
client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: ROOTS }));
client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
  stats.tools_list_changed += 1;
  event("tools_list_changed");
  client.listTools(undefined, { timeout: DEFAULT_TIMEOUT_MS }).catch((error) => stats.errors.push(String(error)));
});

const inner = new StreamableHTTPClientTransport(new URL(mcpUrl), {
  fetch: tappingFetch,
  requestInit: { headers: extraHeaders },
  reconnectionOptions: RECONNECT,
});
const transport = new CountingTransport(inner);

try {
  await discover();
  if (stats.discover_status < 400 || stats.discover_status >= 500) {
    throw new Error(`server/discover answered ${stats.discover_status}, not a 4xx: this client would not fall back`);
  }
  await client.connect(transport, { timeout: DEFAULT_TIMEOUT_MS });
} catch (error) {
  out({ fatal: String(error?.stack ?? error), stats });
  process.exit(1);
}
out({
  ready: true,
  session_id: transport.sessionId ?? null,
  protocol_version: inner.protocolVersion ?? null,
  requested_protocol_version: LATEST_PROTOCOL_VERSION,
  server_info: client.getServerVersion() ?? null,
  discover_status: stats.discover_status,
});

function status() {
  return { ...stats, session_id: transport.sessionId ?? null, uptime_ms: Date.now() - started };
}

async function handle(command) {
  const { id, cmd } = command;
  try {
    if (cmd === "call") {
      const t0 = performance.now();
      const result = await client.callTool({ name: command.name, arguments: command.arguments ?? {} }, undefined, {
        timeout: command.timeout_ms ?? DEFAULT_TIMEOUT_MS,
      });
      const seconds = (performance.now() - t0) / 1000;
      const text = (result.content ?? []).map((c) => c.text ?? "").join("");
      event("call", { name: command.name, seconds });
      out({ id, ok: true, text, is_error: result.isError === true, seconds, result });
    } else if (cmd === "list_tools") {
      const result = await client.listTools(undefined, { timeout: command.timeout_ms ?? DEFAULT_TIMEOUT_MS });
      out({ id, ok: true, tools: result.tools });
    } else if (cmd === "status") {
      out({ id, ok: true, status: status() });
    } else if (cmd === "quit") {
      // Like Claude Code at exit: no DELETE, the session is simply left behind.
      out({ id, ok: true, status: status() });
      await client.close();
      process.exit(0);
    } else {
      out({ id, ok: false, error: `unknown command ${cmd}` });
    }
  } catch (error) {
    event("command_failed", { cmd, error: String(error?.message ?? error).slice(0, 300) });
    out({ id, ok: false, error: String(error?.message ?? error) });
  }
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (!line.trim()) return;
  let command;
  try {
    command = JSON.parse(line);
  } catch {
    out({ ok: false, error: `not JSON: ${line.slice(0, 200)}` });
    return;
  }
  handle(command);
});
// The test went away: so does the client (still without DELETE).
lines.on("close", () => process.exit(0));
