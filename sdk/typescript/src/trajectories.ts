// Trajectory exports (docs/trajectories.md): every page of a
// session/trajectory/export written as JSON Lines byte for byte as the
// host's operator export (`aep export trajectories`), the Go client and
// the Python SDK write them, so that one export is the same bytes whoever
// asked for it.
import type { AepClient, RequestOptions } from "./client.js";
import type { Body, SessionTrajectoryExportReqMessage } from "./messages.gen.js";

/** What session/trajectory/export asks, without the envelope. */
export type TrajectoryExportRequest = Body<SessionTrajectoryExportReqMessage>;

/** A whole export: `text` its JSON Lines, `lines` the same lines decoded. */
export interface TrajectoryExport {
  text: string;
  lines: Record<string, unknown>[];
  records: number;
  /** "complete" or "missing" when an exported episode has a prefix. */
  prefix?: "complete" | "missing";
  /** The episodes whose prefix was not recorded. */
  prefixMissing: string[];
}

/**
 * One export line: JSON with object keys sorted, no spaces, no HTML
 * escaping, U+2028 and U+2029 escaped (as Go writes them), then a newline.
 * Numbers are written as JavaScript writes them, which is as Go does.
 */
export function exportLine(value: unknown): string {
  return encode(value) + "\n";
}

function encode(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (Array.isArray(v)) return "[" + v.map(encode).join(",") + "]";
  if (typeof v === "object") {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o).filter((k) => o[k] !== undefined).sort(compareCodeUnits);
    return "{" + keys.map((k) => stringJSON(k) + ":" + encode(o[k])).join(",") + "}";
  }
  if (typeof v === "string") return stringJSON(v);
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new Error(`${v} is not a JSON number`);
    return JSON.stringify(v);
  }
  return JSON.stringify(v);
}

// Go sorts map keys by their bytes (UTF-8); JavaScript strings compare by
// UTF-16 code units, which differ only past the basic plane's surrogates.
function compareCodeUnits(a: string, b: string): number {
  const ab = Buffer.from(a, "utf8");
  const bb = Buffer.from(b, "utf8");
  return Buffer.compare(ab, bb);
}

function stringJSON(s: string): string {
  return JSON.stringify(s).replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
}

/** Exports every page from `req.after`; see AepClient.exportTrajectories. */
export async function exportTrajectories(client: AepClient, req: TrajectoryExportRequest = {}, opts?: RequestOptions): Promise<TrajectoryExport> {
  const out: TrajectoryExport = { text: "", lines: [], records: 0, prefixMissing: [] };
  const texts: string[] = [];
  let body: TrajectoryExportRequest = { ...req };
  for (;;) {
    const page = await client.sessionTrajectoryExport(body, opts);
    for (const line of page.lines) {
      out.lines.push(line as Record<string, unknown>);
      texts.push(exportLine(line));
    }
    out.records += page.records;
    if (page.prefix !== undefined && out.prefix !== "missing") out.prefix = page.prefix;
    out.prefixMissing.push(...(page.prefix_missing ?? []));
    if (page.next === undefined) break;
    body = { ...body, after: page.next };
  }
  out.text = texts.join("");
  return out;
}
