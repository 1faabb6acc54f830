// A client built on the MCP TypeScript SDK (@modelcontextprotocol/sdk,
// pinned in package.json) calls one tool on an MCP server over streamable
// HTTP with a bearer token, asking for progress (onprogress) and for logs
// (logging/setLevel info), and prints what it got as one JSON line:
// {"progress": [message...], "logs": [{level, data}...], "result": ...}.
// cmd/aep/mcp_test.go runs it against aep serve's /mcp.
//
//   node sdk-client.mjs URL TOKEN TOOL ARGUMENTS_JSON
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token, tool, args] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "aep-ci-sdk-client", version: "1.0.0" });
const progress = [];
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  logs.push({ level: n.params.level, logger: n.params.logger, data: n.params.data });
});
try {
  await client.connect(transport);
  await client.setLoggingLevel("info");
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args) }, undefined, {
    onprogress: (p) => progress.push({ progress: p.progress, message: p.message }),
  });
  console.log(JSON.stringify({ progress, logs, result }));
  await client.close();
} catch (e) {
  console.error(String(e?.message ?? e));
  process.exit(1);
}
