// The echo round trip of the SDK over WebSocket: `ping` → `pong`, one at a
// time, against a running host. Prints one JSON line with the figures; the
// Go benchmark of this directory's parent (echo_bench_test.go) runs it
// beside the Go client against the same host (docs/PERFORMANCE.md).
//
// usage: node build/bench/echo.js <ws url> <token> <round trips>
import { AepClient } from "../src/index.js";

const [url, token, count] = process.argv.slice(2);
if (!url || !token || !count) {
  console.error("usage: node echo.js <ws url> <token> <round trips>");
  process.exit(2);
}
const n = Number(count);
const c = await AepClient.websocket(url);
await c.connect({ agentId: "bench-node", token });
for (let i = 0; i < Math.min(n, 1000); i++) await c.ping(); // warm up the JIT
const start = process.hrtime.bigint();
for (let i = 0; i < n; i++) await c.ping();
const ns = Number(process.hrtime.bigint() - start);
await c.shutdown();
await c.close();
console.log(JSON.stringify({ round_trips: n, ns_per_op: ns / n, ops_per_s: (n * 1e9) / ns }));
