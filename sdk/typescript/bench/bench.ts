// The TypeScript SDK's benchmark driver: sdk/typescript/bench_test.go runs
// it once per case (internal/sdkbench) and reports what it prints.
//
// One case is an operation ("ping", or "step": env/step of the guess
// environment) over a transport ("ws": GET /ws; "exchange": POST /send
// answered with the reply) from --sessions concurrent sessions on Node's
// event loop. The SDK talks to a real `aep serve`; beside it, the floor is
// what Node itself does over the same transport against a bare Go echo
// server (internal/echofloor): the `ws` package (the SDK's own WebSocket
// library), or node:http with a keep-alive agent, each round trip a
// JSON.stringify of the request (with a req_id, so the echo is shaped as a
// reply), a send, the answer, a JSON.parse and a check of the req_id.
// Both sides run --n round trips in alternating blocks of --block per
// session (at least 200 a block), after a warm-up of each; printed last is one JSON line with
// each side's nanoseconds per round trip.
//
// usage: node build/bench/bench.js --op ping|step --transport ws|exchange
//   --sessions N --client node --n N --aep URL --floor URL --token T [--block N]
import http from "node:http";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { AepClient } from "../src/index.js";

const { values: a } = parseArgs({
  options: {
    op: { type: "string" },
    transport: { type: "string" },
    sessions: { type: "string", default: "1" },
    client: { type: "string", default: "node" },
    n: { type: "string" },
    block: { type: "string", default: "20" },
    aep: { type: "string" },
    floor: { type: "string" },
    token: { type: "string" },
  },
});
if (!a.op || !a.transport || !a.n || !a.aep || !a.floor || !a.token || !["ping", "step"].includes(a.op) || !["ws", "exchange"].includes(a.transport)) {
  console.error("usage: node bench.js --op ping|step --transport ws|exchange --sessions N --n N --aep URL --floor URL --token T");
  process.exit(2);
}
const op = a.op;
const n = Number(a.n);
const sessions = Number(a.sessions);
const block = Number(a.block);
const EPISODE = "ep-0123456789abcdef"; // the floor's stand-in for a real episode id
const STEP_OPTIONS = { high: 1_000_000, max_steps: 1_000_000_000 }; // an episode no benchmark finishes
const ACTION = 7;

/** What the floor sends: the request the SDK sends for op, plus the req_id its reply carries. */
function floorRequest(rid: string): Record<string, unknown> {
  if (op === "ping") return { type: "ping", id: rid, proto: "1.0", ts: Date.now() / 1000, req_id: rid };
  return { type: "env/step/req", id: rid, proto: "1.0", ts: Date.now() / 1000, episode_id: EPISODE, action: ACTION, req_id: rid };
}

type Trip = () => Promise<unknown>;
let seq = 0;

async function wsFloor(url: string): Promise<{ trip: Trip; close: () => void }> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
  });
  let waiting: ((data: string) => void) | undefined;
  ws.on("message", (data) => {
    const w = waiting;
    waiting = undefined;
    w?.(data.toString());
  });
  const trip = () =>
    new Promise<void>((resolve, reject) => {
      const rid = `f-${seq++}`;
      waiting = (data) => {
        const reply = JSON.parse(data) as { req_id?: string };
        if (reply.req_id !== rid) reject(new Error(`floor: reply ${data} to ${rid}`));
        else resolve();
      };
      ws.send(JSON.stringify(floorRequest(rid)));
    });
  return { trip, close: () => ws.close() };
}

function exchangeFloor(base: string, agent: http.Agent): Trip {
  const u = new URL(base);
  return () =>
    new Promise<void>((resolve, reject) => {
      const rid = `f-${seq++}`;
      const body = JSON.stringify(floorRequest(rid));
      const req = http.request(
        {
          hostname: u.hostname,
          port: u.port,
          path: "/send",
          method: "POST",
          agent,
          headers: { "Content-Type": "text/plain", Accept: "application/json", "X-Session-Id": "floor", "Content-Length": Buffer.byteLength(body) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            const reply = JSON.parse(Buffer.concat(chunks).toString()) as { req_id?: string };
            if (res.statusCode !== 200 || reply.req_id !== rid) reject(new Error(`floor: ${res.statusCode} to ${rid}`));
            else resolve();
          });
        },
      );
      req.on("error", reject);
      req.end(body);
    });
}

async function sdkSession(): Promise<{ trip: Trip; client: AepClient }> {
  const c = a.transport === "ws" ? await AepClient.websocket(a.aep!) : await AepClient.exchange(a.aep!);
  await c.connect({ agentId: "bench-node", token: a.token!, caps: ["env"] });
  if (op === "ping") return { trip: () => c.ping(), client: c };
  const r = await c.envReset({ env_name: "guess", seed: 1, options: STEP_OPTIONS });
  return { trip: () => c.envStep({ episode_id: r.episode_id, action: ACTION }), client: c };
}

/** Runs count round trips over trips, each session one at a time; returns the nanoseconds taken. */
async function run(trips: Trip[], count: number): Promise<number> {
  let left = count;
  const start = process.hrtime.bigint();
  await Promise.all(
    trips.map(async (trip) => {
      while (left > 0) {
        left--;
        await trip();
      }
    }),
  );
  return Number(process.hrtime.bigint() - start);
}

const agent = new http.Agent({ keepAlive: true });
const floors: Trip[] = [];
const closers: (() => void)[] = [];
for (let i = 0; i < sessions; i++) {
  if (a.transport === "ws") {
    const f = await wsFloor(a.floor);
    floors.push(f.trip);
    closers.push(f.close);
  } else floors.push(exchangeFloor(a.floor, agent));
}
const sdk = await Promise.all(Array.from({ length: sessions }, () => sdkSession()));
const sdkTrips = sdk.map((s) => s.trip);

const perBlock = Math.max(200, block * sessions);
const warm = Math.min(n, 1000);
await run(floors, warm);
await run(sdkTrips, warm);
let tFloor = 0;
let tSdk = 0;
for (let done = 0; done < n; ) {
  const k = Math.min(perBlock, n - done);
  tFloor += await run(floors, k);
  tSdk += await run(sdkTrips, k);
  done += k;
}
for (const s of sdk) {
  await s.client.shutdown();
  await s.client.close();
}
for (const c of closers) c();
agent.destroy();
console.log(JSON.stringify({ floor_ns_per_op: tFloor / n, sdk_ns_per_op: tSdk / n, n }));
