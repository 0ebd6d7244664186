// Resources and prompts through the TypeScript MCP SDK: navigate, subscribe to the page resource,
// navigate again and wait for notifications/resources/updated, read the page back; list and get
// prompts (a missing argument must fail); read another session's resource (must fail).
// Usage: node ts_resources_client.mjs SDK_DIST_DIR MCP_URL PAGE_URL SECOND_URL OTHER_SESSION_URI
// The router's token comes in MCP_ROUTER_TOKEN, sent as a bearer header. Prints one JSON line.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [sdkDist, mcpUrl, pageUrl, secondUrl, otherUri] = process.argv.slice(2);
const load = (path) => import(pathToFileURL(join(sdkDist, path)).href);
const { Client } = await load("esm/client/index.js");
const { StreamableHTTPClientTransport } = await load("esm/client/streamableHttp.js");
const { ResourceUpdatedNotificationSchema } = await load("esm/types.js");
const UPDATE_TIMEOUT_MS = 30000;

const client = new Client({ name: "ts-sdk-resources", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), {
  requestInit: { headers: { authorization: `Bearer ${process.env.MCP_ROUTER_TOKEN}` } },
});
const updates = [];
let updated = () => {};
client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => {
  updates.push(n.params.uri);
  updated();
});
await client.connect(transport);

const errorCode = async (promise) => {
  try {
    await promise;
    return null;
  } catch (error) {
    return error?.code ?? String(error);
  }
};

await client.callTool({ name: "browser_navigate", arguments: { url: pageUrl } });
const pageUri = `playwright:///page/${transport.sessionId}/0`;
const listed = (await client.listResources()).resources.map((r) => r.uri);
await client.subscribeResource({ uri: pageUri });
let updateTimer;
const arrived = new Promise((resolve, reject) => {
  updated = resolve;
  updateTimer = setTimeout(() => reject(new Error("no resources/updated notification")), UPDATE_TIMEOUT_MS);
});
await client.callTool({ name: "browser_navigate", arguments: { url: secondUrl } });
await arrived;
clearTimeout(updateTimer); // a pending timer would keep node (and the test) waiting its full 30 s
const page = JSON.parse((await client.readResource({ uri: pageUri })).contents[0].text);
const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
const prompt = await client.getPrompt({ name: "login-flow", arguments: { url: pageUrl } });
const out = {
  sessionId: transport.sessionId,
  capabilities: client.getServerCapabilities(),
  listed,
  updates,
  page: { url: page.url, title: page.title, snapshot: page.snapshot },
  prompts,
  promptText: prompt.messages.map((m) => m.content.text).join("\n"),
  missingArgument: await errorCode(client.getPrompt({ name: "login-flow", arguments: {} })),
  otherSession: await errorCode(client.readResource({ uri: otherUri })),
};
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
