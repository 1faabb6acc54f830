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
// reply), a send, the answer, a JSON.parse and a check of the req_id. A
// third side, the same bare client talking to aep itself (handshaken, then
// the same requests), tells the SDK's own cost from the host's. The sides
// run --n round trips each in alternating blocks of --block per session (at
// least 200 a block), after a warm-up of each; printed last is one JSON
// line with each side's nanoseconds per round trip.
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

/** What the bare client sends: the request the SDK sends for op; to the echo floor (echo) with the req_id its reply carries. */
function bareRequest(rid: string, episode: string, echo: boolean): Record<string, unknown> {
  const msg: Record<string, unknown> =
    op === "ping" ? { type: "ping", id: rid, proto: "1.0", ts: Date.now() / 1000 } : { type: "env/step/req", id: rid, proto: "1.0", ts: Date.now() / 1000, episode_id: episode, action: ACTION };
  if (echo) msg.req_id = rid;
  return msg;
}

const handshake = () => ({ type: "handshake/req", id: "h", proto: "1.0", ts: Date.now() / 1000, agent_id: "bench-bare", agent_caps: ["env"], auth_token: a.token });
const reset = () => ({ type: "env/reset/req", id: "r", proto: "1.0", ts: Date.now() / 1000, env_name: "guess", seed: 1, options: STEP_OPTIONS });

type Trip = () => Promise<unknown>;
let seq = 0;

/** A session of the bare `ws` client: against aep when aep (handshaken, an episode reset), else against the echo floor. */
async function wsBare(url: string, aep: boolean): Promise<{ trip: Trip; close: () => void }> {
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
  const exchange = (msg: unknown) =>
    new Promise<Record<string, unknown>>((resolve) => {
      waiting = (data) => resolve(JSON.parse(data) as Record<string, unknown>);
      ws.send(JSON.stringify(msg));
    });
  let episode = EPISODE;
  if (aep) {
    if ((await exchange(handshake())).ok !== true) throw new Error("bare client: handshake refused");
    if (op === "step") episode = String((await exchange(reset())).episode_id);
  }
  const trip = () =>
    new Promise<void>((resolve, reject) => {
      const rid = `f-${seq++}`;
      waiting = (data) => {
        const reply = JSON.parse(data) as { req_id?: string };
        if (reply.req_id !== rid) reject(new Error(`bare client: reply ${data} to ${rid}`));
        else resolve();
      };
      ws.send(JSON.stringify(bareRequest(rid, episode, !aep)));
    });
  return { trip, close: () => ws.close() };
}

/** A single-exchange session of the bare node:http client: aep's (created, handshaken, an episode reset) when aep, else the echo floor's. */
async function exchangeBare(base: string, agent: http.Agent, aep: boolean): Promise<Trip> {
  const u = new URL(base);
  let sid = "floor";
  const post = (path: string, msg: unknown) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const body = msg === undefined ? "" : JSON.stringify(msg);
      const req = http.request(
        {
          hostname: u.hostname,
          port: u.port,
          path,
          method: "POST",
          agent,
          headers: { "Content-Type": "text/plain", Accept: "application/json", "X-Session-Id": sid, "Content-Length": Buffer.byteLength(body) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            if (res.statusCode !== 200) reject(new Error(`bare client: HTTP ${res.statusCode}`));
            else resolve(JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown>);
          });
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  let episode = EPISODE;
  if (aep) {
    sid = String((await post("/session", undefined)).session_id);
    if ((await post("/send", handshake())).ok !== true) throw new Error("bare client: handshake refused");
    if (op === "step") episode = String((await post("/send", reset())).episode_id);
  }
  return async () => {
    const rid = `f-${seq++}`;
    const reply = await post("/send", bareRequest(rid, episode, !aep));
    if (reply.req_id !== rid) throw new Error(`bare client: a reply to another request than ${rid}`);
  };
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
const closers: (() => void)[] = [];
/** The bare client's sessions, against aep or the floor. */
async function bare(aep: boolean): Promise<Trip[]> {
  const trips: Trip[] = [];
  for (let i = 0; i < sessions; i++) {
    if (a.transport === "ws") {
      const f = await wsBare(aep ? a.aep! : a.floor!, aep);
      trips.push(f.trip);
      closers.push(f.close);
    } else trips.push(await exchangeBare(aep ? a.aep! : a.floor!, agent, aep));
  }
  return trips;
}
const floors = await bare(false);
const raws = await bare(true);
const sdk = await Promise.all(Array.from({ length: sessions }, () => sdkSession()));
const sides = [floors, raws, sdk.map((s) => s.trip)];

const perBlock = Math.max(200, block * sessions);
const warm = Math.min(n, 1000);
for (const side of sides) await run(side, warm);
const total = sides.map(() => 0);
for (let done = 0; done < n; ) {
  const k = Math.min(perBlock, n - done);
  for (const [i, side] of sides.entries()) total[i]! += await run(side, k);
  done += k;
}
for (const s of sdk) {
  await s.client.shutdown();
  await s.client.close();
}
for (const c of closers) c();
agent.destroy();
console.log(JSON.stringify({ floor_ns_per_op: total[0]! / n, raw_ns_per_op: total[1]! / n, sdk_ns_per_op: total[2]! / n, n }));
