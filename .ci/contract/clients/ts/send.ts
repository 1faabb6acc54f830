// The TypeScript client quicktype generates from the contract (aep.ts)
// sends one line of every message type an agent sends to a real host,
// through the single exchange (POST /send with Accept: application/json,
// Node's fetch: no WebSocket or SSE library). Each line is decoded with
// the generated converter of its message (Convert.to<Def>, which checks
// it at run time) and sent as that type serializes (Convert.<def>ToJson).
// A reply that refuses a line as malformed (parse_error,
// schema_violation, version_mismatch), or a refused handshake, fails the
// run. Built with tsc --strict.
//
// usage: node out/send.js <host base URL> <requests.json>
import { readFileSync } from "node:fs";
import { Convert } from "./aep.js";

interface Request {
  type: string;
  def: string;
  name: string;
  line: string;
}

const [base, file] = process.argv.slice(2);
if (!base || !file) {
  console.error("usage: node out/send.js <host base URL> <requests.json>");
  process.exit(2);
}
const reqs: Request[] = JSON.parse(readFileSync(file, "utf8"));
const malformed = new Set(["parse_error", "schema_violation", "version_mismatch"]);

// The converters by lower-cased name: quicktype camel-cases def names
// (McpServerListReqMessage → mcpServerListReqMessageToJson).
const methods = new Map<string, (x: unknown) => unknown>();
for (const name of Object.getOwnPropertyNames(Convert)) {
  const f = (Convert as unknown as Record<string, unknown>)[name];
  if (typeof f === "function") methods.set(name.toLowerCase(), f as (x: unknown) => unknown);
}
function converter(name: string): (x: unknown) => unknown {
  const f = methods.get(name.toLowerCase());
  if (!f) throw new Error(`no generated converter ${name}`);
  return f;
}

async function main(): Promise<void> {
  const created = await fetch(base + "/session", { method: "POST" });
  const { session_id: session } = (await created.json()) as { session_id: string };
  if (!session) throw new Error("POST /session gave no session_id");
  let bad = 0;
  for (const r of reqs) {
    let body: string;
    try {
      const value = converter("to" + r.def)(r.line);
      body = converter(r.def + "ToJson")(value) as string;
    } catch (e) {
      bad++;
      console.error(`FAIL ${r.type} ${r.name}: the generated type does not round-trip the line: ${e}`);
      continue;
    }
    const res = await fetch(base + "/send", {
      method: "POST",
      headers: { "X-Session-Id": session, "Content-Type": "application/json", Accept: "application/json" },
      body,
    });
    const text = await res.text();
    if (res.status === 202) {
      console.log(`${r.type.padEnd(32)} ${r.name.padEnd(24)} 202 (a notification)`);
      continue;
    }
    let m: { type?: string; code?: string; ok?: boolean } = {};
    try {
      m = JSON.parse(text);
    } catch {
      // judged below
    }
    if (res.status !== 200 || !m.type) {
      bad++;
      console.error(`FAIL ${r.type} ${r.name}: HTTP ${res.status} ${text}`);
    } else if ((m.type === "error" && malformed.has(m.code ?? "")) || (m.type === "handshake/resp" && m.ok !== true)) {
      bad++;
      console.error(`FAIL ${r.type} ${r.name}: sent ${body}\n  answered ${text}`);
    } else {
      console.log(`${r.type.padEnd(32)} ${r.name.padEnd(24)} ${m.type} ${m.code ?? ""}`);
    }
  }
  if (bad > 0) throw new Error(`${bad} of ${reqs.length} lines refused or not sent`);
  console.log(`typescript (quicktype): ${reqs.length} lines of ${new Set(reqs.map((r) => r.type)).size} message types sent, none refused as malformed`);
}

main().catch((e) => {
  console.error(`typescript client: ${e instanceof Error ? e.message : e}`);
  process.exit(1);
});
