// A client built on the TypeScript MCP SDK: connect through the router, list tools, navigate,
// print what came back as one JSON line. Usage: node ts_client.mjs SDK_DIST_DIR MCP_URL PAGE_URL
// The router's token comes in the MCP_ROUTER_TOKEN environment variable, sent as a bearer header.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [sdkDist, mcpUrl, pageUrl] = process.argv.slice(2);
const { Client } = await import(pathToFileURL(join(sdkDist, "esm/client/index.js")).href);
const { StreamableHTTPClientTransport } = await import(
  pathToFileURL(join(sdkDist, "esm/client/streamableHttp.js")).href
);

const client = new Client({ name: "ts-sdk-check", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), {
  requestInit: { headers: { authorization: `Bearer ${process.env.MCP_ROUTER_TOKEN}` } },
});
await client.connect(transport);
const tools = await client.listTools();
const result = await client.callTool({ name: "browser_navigate", arguments: { url: pageUrl } });
const out = {
  sessionId: transport.sessionId,
  tools: tools.tools.map((t) => t.name),
  text: result.content.map((c) => c.text ?? "").join(""),
};
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
