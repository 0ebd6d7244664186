// mcp-router dashboard. Plain DOM, no framework, no build step. Everything the page shows comes
// from browser-driven pages (snapshots, console text, titles), so it is written with textContent
// only: never innerHTML.
"use strict";

const POLL_MS = 1500;
const ACTION_HEADER = "X-MCP-Router-Action";

// cluster: null until known; then whether this node lists the whole cluster (--cluster-node).
// pictured: the session whose page picture was taken (or found impossible) since it was opened.
const state = { selected: null, callsKey: "", call: null, cluster: null, pictured: null };

const $ = (id) => document.getElementById(id);

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(child == null ? "" : String(child)));
  }
  return node;
}

function short(id) {
  if (!id) return "";
  // "<node>.<random>" behind a balancer (--node-id): the node and the start of the random part.
  const text = String(id);
  const dot = text.indexOf(".");
  return dot > 0 ? text.slice(0, dot + 9) : text.slice(0, 8);
}

function nodeOf(id) {
  const dot = String(id).indexOf(".");
  return dot > 0 ? String(id).slice(0, dot) : null;
}

function duration(seconds) {
  if (seconds == null || !isFinite(seconds)) return "-";
  seconds = Math.max(0, seconds);
  if (seconds < 60) return Math.floor(seconds) + "s";
  if (seconds < 3600) return Math.floor(seconds / 60) + "m";
  if (seconds < 86400) return Math.floor(seconds / 3600) + "h " + Math.floor((seconds % 3600) / 60) + "m";
  return Math.floor(seconds / 86400) + "d";
}

function mib(bytes) {
  return bytes == null ? "-" : (bytes / 1048576).toFixed(0) + " MiB";
}

function clock(ts) {
  return ts == null ? "-" : new Date(ts * 1000).toLocaleTimeString();
}

async function getJson(url) {
  const response = await fetch(url, { headers: { accept: "application/json" }, cache: "no-store" });
  if (response.status === 401) location.replace("/ui/login");  // signed out (new token, cleared cookie)
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || response.status + " " + response.statusText);
  return body;
}

// ------------------------------------------------------------------ sessions list

function pageCell(s) {
  if (!s.url) return el("td", { className: "page" }, "-");
  return el("td", { className: "page" }, s.title || "(untitled)", el("span", { className: "url" }, s.url));
}

// A conversation's sessions together (newest conversation first), under one line naming it.
function grouped(sessions) {
  const groups = new Map();
  for (const s of sessions) {
    const key = s.conversation || "session:" + s.id;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(s);
  }
  return [...groups.values()];
}

function conversationRow(group) {
  const tr = el("tr", { className: "conversation" },
    el("td", { colSpan: 10 }, "conversation " + group[0].conversation.slice(0, 12) + " · " + group.length +
      " session" + (group.length === 1 ? "" : "s")));
  tr.dataset.conversation = group[0].conversation;
  return tr;
}

function renderSessions(data) {
  const tbody = $("sessions").tBodies[0];
  const rows = [];
  for (const group of grouped(data.sessions)) {
    if (group[0].conversation) rows.push(conversationRow(group));
    rows.push(...group.map((s) => sessionRow(s, data)));
  }
  tbody.replaceChildren(...rows);
  $("no-sessions").hidden = data.sessions.length > 0;
}

function sessionRow(s, data) {
  const tr = el(
    "tr",
    { className: "session" + (s.id === state.selected ? " selected" : "") },
    el("td", {}, el("code", { title: s.id }, short(s.id))),
    el("td", {}, el("span", { className: "state state-" + s.state }, s.state)),
    el("td", {}, s.client || "-"),
    pageCell(s),
    el("td", {}, duration(data.now - s.created)),
    el("td", {}, s.last_activity ? duration(data.now - s.last_activity) + " ago" : "-"),
    el("td", { className: "num" }, s.calls == null ? "-" : s.calls),
    el("td", { className: "num" + (s.errors ? " has-errors" : "") }, s.errors == null ? "-" : s.errors),
    el("td", {}, workerText(s)),
    el("td", { className: "num" }, s.host ? "(host)" : mib(s.memory_bytes)),
  );
  tr.dataset.sessionId = s.id;
  tr.dataset.state = s.state;
  if (s.conversation) tr.dataset.conversation = s.conversation;
  const node = nodeOf(s.id);
  if (data.node && node && node !== data.node) {
    // Another node's session: its calls are in that node's record, shown by that node's /ui.
    tr.classList.add("remote");
    tr.title = "on node " + node + (s.node ? " (" + s.node + ")" : "") + ": open that node's dashboard";
  } else {
    tr.addEventListener("click", () => selectSession(s.id));
  }
  return tr;
}

// Warm workers held for dormant sessions' resumes: no session's, so in no row of the table. The
// same words as `mcp-router sessions` (router/cli/tables.py, format_reserve).
function reserveText(reserve) {
  if (reserve.max <= 0) return "resume reserve: none (--resume-reserve 0)";
  const plural = reserve.workers === 1 ? "" : "s";
  return "resume reserve: " + reserve.workers + " warm worker" + plural +
    " (at most " + reserve.max + ", while browsed sessions sleep)";
}

function renderReserve(reserve) {
  // The cluster view has no one reserve: each node keeps its own.
  $("reserve").hidden = !reserve;
  $("reserve").textContent = reserve ? reserveText(reserve) : "";
}

function workerText(s) {
  if (!s.worker_pid) return "-";
  return (s.host ? "host " + short(s.host) + " · " : "") + "pid " + s.worker_pid + " :" + s.worker_port;
}

// Workers several sessions share (--sessions-per-browser): each with its sessions and memory.
function renderHosts(hosts, perBrowser) {
  $("hosts").hidden = !hosts;
  if (!hosts) return;
  const each = hosts.map((h) => short(h.id) + ": " + h.sessions + " session" + (h.sessions === 1 ? "" : "s") +
    ", " + mib(h.pss_bytes));
  $("hosts").textContent = "shared browsers (" + perBrowser + " sessions each): " +
    (each.length ? each.join(" · ") : "none running");
}

async function pollSessions() {
  try {
    if (state.cluster === null) {
      state.cluster = (await getJson("/api/cluster/sessions")).configured === true;
    }
    const data = await getJson(state.cluster ? "/api/cluster/sessions" : "/api/sessions");
    renderSessions(data);
    renderReserve(data.reserve);
    renderHosts(data.hosts, data.sessions_per_browser);
    // Each node of a cluster keeps its own sessions: say which node this is, and who is silent.
    const node = data.node ? "node " + data.node + (state.cluster ? " (cluster view)" : "") + " · " : "";
    const missing = (data.missing || []).map((url) => " · " + url + " not answering").join("");
    $("status").textContent = node + "live · updated " + new Date().toLocaleTimeString() + missing;
    $("status").className = "ok";
  } catch (err) {
    $("status").textContent = "router unreachable: " + err.message;
    $("status").className = "bad";
  }
}

// ------------------------------------------------------------------ one session

function argsText(call) {
  const params = call.params || {};
  const args = call.tool ? params.arguments : params;
  if (args == null || (typeof args === "object" && Object.keys(args).length === 0)) return "";
  return JSON.stringify(args);
}

const RESUME_REASONS = {
  idle: "resumed after idle",
  crash: "resumed after a crash",
  hibernation: "resumed after hibernation",
  "router-restart": "resumed after a router restart",
  "new-browser": "new browser (create_new_session)",
  conversation: "conversation resumed (its last session's browser)",
};

function eventText(e) {
  if (e.kind === "resumed") return RESUME_REASONS[e.detail] || "resumed (" + e.detail + ")";
  return e.kind + (e.detail ? " (" + e.detail + ")" : "");
}

function renderSession(data) {
  const s = data.session;
  $("session-id").textContent = s.id;
  $("session-id").title = s.id;
  $("session-state").textContent = s.state;
  $("session-state").className = "state state-" + s.state;
  const meta = [s.client || "unknown client", "created " + clock(s.created)];
  if (s.worker_pid) meta.push((s.host ? "on shared browser " + s.host + ", " : "") + "worker pid " + s.worker_pid + " port " + s.worker_port);
  if (s.memory_bytes != null) meta.push(mib(s.memory_bytes));
  if (s.last_resume) meta.push(eventText({ kind: "resumed", detail: s.last_resume }));
  $("session-meta").textContent = meta.join(" · ");
  $("session-page").textContent = s.url ? "Page: " + (s.title || "(untitled)") + " — " + s.url : "Page: -";
  $("picture-button").disabled = !s.worker_pid;
  if (state.pictured !== s.id) {  // once per opening of a session: a picture if it has a browser
    state.pictured = s.id;
    if (s.worker_pid) takePicture();
    else noPicture();
  }
  $("end-button").disabled = !s.live;
  $("hibernate-button").disabled = !s.worker_pid; // dormant already: nothing to hibernate
  const events = data.events || [];
  const key = JSON.stringify([data.calls.map((c) => [c.ref_id, c.status]), events.length]);
  if (key === state.callsKey) return; // unchanged: keep the DOM (and a pending click) as it is
  state.callsKey = key;
  const rows = data.calls.map((c) => {
    const tr = el(
      "tr",
      { className: "call" + (c.ref_id === state.call ? " selected" : "") },
      el("td", {}, clock(c.ts)),
      el("td", {}, c.tool || c.method),
      el("td", { className: "args" }, argsText(c)),
      el("td", {}, el("span", { className: "status status-" + (c.status || "pending") }, c.status || "pending")),
      el("td", { className: "num" }, c.duration_ms == null ? "-" : Math.round(c.duration_ms) + " ms"),
    );
    tr.dataset.refId = c.ref_id;
    tr.dataset.tool = c.tool || c.method;
    tr.addEventListener("click", () => selectCall(c.ref_id));
    return [c.ts, tr];
  });
  for (const e of events) {
    const tr = el("tr", { className: "event" }, el("td", {}, clock(e.ts)), el("td", { colSpan: 4 }, eventText(e)));
    tr.dataset.kind = e.kind;
    rows.push([e.ts, tr]);
  }
  rows.sort((a, b) => a[0] - b[0]);
  $("calls").tBodies[0].replaceChildren(...rows.map((r) => r[1]));
  $("no-calls").hidden = rows.length > 0;
}

async function pollSession() {
  if (!state.selected) return;
  try {
    renderSession(await getJson("/api/sessions/" + encodeURIComponent(state.selected)));
  } catch (err) {
    $("session-meta").textContent = err.message;
  }
}

function noPicture() {
  $("page-picture").hidden = false;
  $("page-image").removeAttribute("src");
  $("page-image").hidden = true;
  $("page-picture-note").textContent = "no picture: the session has no browser open now";
}

// The page as it is now, taken when asked (opening the session, or the button): never kept.
async function takePicture() {
  const id = state.selected;
  if (!id) return;
  $("page-picture").hidden = false;
  $("page-picture-note").textContent = "taking a picture…";
  try {
    const response = await fetch("/api/sessions/" + encodeURIComponent(id) + "/picture", { cache: "no-store" });
    if (id !== state.selected) return;
    const old = $("page-image").src;
    if (response.status === 200) {
      $("page-image").src = URL.createObjectURL(await response.blob());
      $("page-image").hidden = false;
      $("page-picture-note").textContent = "taken " + new Date().toLocaleTimeString();
    } else {
      noPicture();
    }
    if (old.startsWith("blob:")) URL.revokeObjectURL(old);
  } catch (err) {
    $("page-picture-note").textContent = "no picture: " + err.message;
  }
}

function selectSession(id) {
  state.selected = id;
  state.callsKey = "";
  state.call = null;
  $("session-panel").hidden = false;
  $("call-panel").hidden = true;
  $("action-result").textContent = "";
  for (const tr of $("sessions").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.sessionId === id);
  state.pictured = null;
  pollSession();
}

// ------------------------------------------------------------------ one call

let snapshotLines = [];

function renderSnapshot() {
  const query = $("snapshot-search").value.trim().toLowerCase();
  const lines = query ? snapshotLines.filter((l) => l.toLowerCase().includes(query)) : snapshotLines;
  $("snapshot").textContent = snapshotLines.length ? lines.join("\n") : "(no page snapshot for this call)";
  $("snapshot-count").textContent = query ? lines.length + " of " + snapshotLines.length + " lines" : "";
}

function renderCall(call) {
  $("call-ref").textContent = call.ref_id;
  $("call-tool").textContent = call.tool || call.method;
  const meta = [call.status || "pending"];
  if (call.duration_ms != null) meta.push(Math.round(call.duration_ms) + " ms");
  if (call.error) meta.push("error: " + call.error);
  $("call-meta").textContent = meta.join(" · ");
  snapshotLines = call.page_snapshot ? call.page_snapshot.split("\n") : [];
  renderSnapshot();
  const entries = (call.console || []).map((e) => {
    const where = e.location && e.location.url ? " @ " + e.location.url + ":" + e.location.line : "";
    return el("li", { className: "level-" + e.level }, el("span", { className: "level" }, e.level), e.message + where);
  });
  $("console").replaceChildren(...(entries.length ? entries : [el("li", { className: "empty" }, "(no console entries)")]));
  const images = (call.images || []).map((img) =>
    el("figure", {}, el("img", { src: img.url, alt: img.name }), el("figcaption", {}, img.name + " (" + img.source + ")")),
  );
  $("images").replaceChildren(...(images.length ? images : [el("p", { className: "empty" }, "(none)")]));
  const files = (call.files || []).map((f) =>
    el("li", {}, el("a", { href: f.url, download: f.name }, f.name), " — " + (f.title || f.mime) + ", " + f.size + " bytes"),
  );
  $("files").replaceChildren(...(files.length ? files : [el("li", { className: "empty" }, "(none kept)")]));
  let raw = call.result;
  try {
    raw = JSON.stringify(JSON.parse(call.result), null, 2);
  } catch (_) {
    // not JSON: show as recorded
  }
  $("raw").textContent = raw == null ? "(no result)" : raw;
}

async function selectCall(ref) {
  state.call = ref;
  for (const tr of $("calls").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.refId === ref);
  try {
    const data = await getJson("/api/calls/" + encodeURIComponent(ref));
    $("call-panel").hidden = false;
    renderCall(data.call);
  } catch (err) {
    $("call-panel").hidden = false;
    $("call-meta").textContent = err.message;
  }
}

// ------------------------------------------------------------------ actions

async function act(name, question) {
  const id = state.selected;
  if (!id || !window.confirm(question.replace("{id}", short(id)))) return;
  $("action-result").textContent = name + "…";
  try {
    const response = await fetch("/api/sessions/" + encodeURIComponent(id) + "/" + name, {
      method: "POST",
      headers: { [ACTION_HEADER]: "1" },
    });
    const body = await response.json().catch(() => ({}));
    $("action-result").textContent = response.ok ? "session is now " + body.state : "failed: " + (body.error || response.status);
  } catch (err) {
    $("action-result").textContent = "failed: " + err.message;
  }
  pollSessions();
  pollSession();
}

$("end-button").addEventListener("click", () =>
  act("end", "End session {id}? Its browser is closed and the session cannot be used again."),
);
$("hibernate-button").addEventListener("click", () =>
  act("hibernate", "Hibernate session {id}? Its browser is stopped; the next call resumes it."),
);
$("snapshot-search").addEventListener("input", renderSnapshot);
$("picture-button").addEventListener("click", takePicture);

pollSessions();
setInterval(() => {
  pollSessions();
  pollSession();
}, POLL_MS);
