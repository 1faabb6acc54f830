// A TypeScript agent's use of the contract: types generated from
// gen/contract/aep.schema.json by json-schema-to-typescript with default
// settings (into ./aep.ts), narrowed by `type`, then run over a recorded
// session's host lines. tsc --strict must accept it, and the @ts-expect-error
// lines prove that wrong messages do not type-check.
import { readFileSync } from "node:fs";
import type { AnyAgentMessage as AgentMessage, AnyHostMessage as HostMessage, ErrorCode, ToolCallReqMessage } from "./aep.js";
// The unions as generators see them: a oneOf of the messages (the bundle's
// AgentMessage and HostMessage dispatch on type with if/then, for validators).

// Each host message, narrowed by its type; every branch reads fields only
// that type has.
export function describe(m: HostMessage): string {
  switch (m.type) {
    case "handshake/resp":
      return m.ok ? `session ${m.session_id ?? "?"}, ${m.accepted_caps.length} caps` : `refused: ${m.error?.code ?? "?"}`;
    case "error": {
      const code: ErrorCode = m.code;
      return `${m.req_id}: ${code}${m.retryable ? " (retryable)" : ""}`;
    }
    case "tool/call/resp":
      return `${m.result.tool_name}: ${m.result.success ? "ok" : m.result.error_code ?? "failed"}`;
    case "tool/event":
    case "skill/event":
      return `${m.req_id} #${m.seq} ${m.kind}`;
    case "pong":
      return `pong after ${m.uptime_seconds}s`;
    default:
      return m.type;
  }
}

const call: ToolCallReqMessage = { type: "tool/call/req", id: "1", proto: "1.0", ts: 1, tool_name: "echo", arguments: {} };
export const sent: AgentMessage = call;

// @ts-expect-error: a tool call's body under env/step/req is not a message.
export const wrongType: AgentMessage = { type: "env/step/req", id: "1", proto: "1.0", ts: 1, tool_name: "echo", arguments: {} };
// @ts-expect-error: a reply needs req_id.
export const noReqID: HostMessage = { type: "pong", id: "1", proto: "1.0", ts: 1, uptime_seconds: 1 };
// @ts-expect-error: codes are the catalogue's.
export const badCode: ErrorCode = "oops";

// Run over a recording of `aep conformance --record`: every host line is
// handled; the count of each type is printed.
const file = process.argv[2];
if (file) {
  const counts = new Map<string, number>();
  for (const rec of readFileSync(file, "utf8").split("\n")) {
    if (!rec) continue;
    const r = JSON.parse(rec) as { from: string; line: string };
    if (r.from !== "host") continue;
    const m = JSON.parse(r.line) as HostMessage;
    describe(m);
    counts.set(m.type, (counts.get(m.type) ?? 0) + 1);
  }
  console.log(`handled ${[...counts.values()].reduce((a, b) => a + b, 0)} host messages of ${counts.size} types`);
}
