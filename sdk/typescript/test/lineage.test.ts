// Trajectory exports through the TypeScript SDK (docs/trajectories.md):
// exportLine against the golden lines Go's wire.WriteLine and the Python
// SDK are held to, and a fork group's export from a real aep binary —
// whole episodes, the parent's records first in each, group ids, env and
// feedback rewards — the same bytes as `aep export trajectories` writes.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { AepClient, exportLine } from "../src/index.js";
import { aepBinary, dataDir, startNetHost, token, type NetHost } from "./host.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const golden = path.join(repoRoot, "wire", "testdata");

test("exportLine writes the golden lines", () => {
  const values = JSON.parse(readFileSync(path.join(golden, "export_line.json"), "utf8")) as unknown[];
  assert.equal(values.map(exportLine).join(""), readFileSync(path.join(golden, "export_line.golden"), "utf8"));
  assert.throws(() => exportLine(Number.NaN));
});

const bin = aepBinary();
const data = dataDir();
let net: NetHost | undefined;

before(async () => {
  if (!bin) return;
  const cfg = path.join(data, "lineage.yaml");
  writeFileSync(cfg, `server:
  trajectories:
    record: all
plugins:
  - name: env
    type: env
    cls: aep.env.builtin
    config:
      envs: [guess]
  - name: learn
    type: learn
    cls: aep.learn.builtin
`);
  net = await startNetHost(bin, ["--config", cfg, "--data-dir", data]);
});
after(async () => {
  await net?.stop();
});

describe("a fork group's export", { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
  test("four whole episodes with group ids and rewards, the bytes aep export writes", async () => {
    const parent = await AepClient.http(net!.base);
    let group = "";
    let handles: string[] = [];
    try {
      await parent.connect({ agentId: "ts-grpo", token, caps: ["env", "learn", "session"] });
      const { episode_id } = await parent.envReset({ env_name: "guess", seed: 11 });
      await parent.envStep({ episode_id, action: 10 });
      const forks = await parent.fork(4);
      group = forks.reply.group!;
      assert.match(group, /^g-[0-9a-f]{32}$/);
      try {
        for (const [i, c] of forks.clients.entries()) {
          let lo = 11, hi = 100;
          for (let n = 0; n < 64; n++) {
            const g = Math.floor((lo + hi) / 2);
            const s = await c.envStep({ episode_id, action: g });
            if (s.terminated) break;
            if ((s.observation as { hint: number }).hint < 0) hi = g;
            else lo = g + 1;
          }
          await c.learnFeedback({ feedbacks: [{ type: "NEUTRAL", score: i / 4, component: { kind: "env", name: "guess" } }] });
        }
        handles = forks.reply.forks.map((f) => f.handle);
      } finally {
        await forks.close();
      }
      for (const format of ["jsonl", "chat"] as const) {
        const exp = await parent.exportTrajectories({ group, format, limit: 5 });
        assert.equal(exp.prefix, "complete");
        const cli = execFileSync(bin!, ["export", "trajectories", "--group", group, "--format", format, "--data-dir", data], { encoding: "utf8" });
        assert.equal(exp.text, cli);
        if (format === "chat") {
          assert.deepEqual(exp.lines.map((s) => s.session), handles);
          for (const [i, s] of exp.lines.entries()) {
            assert.equal(s.group, group);
            const env = s.env_rewards as number[];
            assert.equal(env[0], 0); // the parent's step, the prefix
            assert.equal(env[env.length - 1], 1);
            assert.deepEqual(s.episode_rewards, [i / 4]);
            assert.equal(s.total_reward, 1 + i / 4);
          }
        } else {
          for (const h of handles) {
            const ep = exp.lines.filter((l) => l.episode === h);
            assert.equal(ep[0]!.type, "handshake/req");
            assert.notEqual(ep[0]!.session, h);
            assert.ok(ep.some((l) => l.type === "env/reset/resp"));
          }
        }
      }
    } finally {
      await parent.close();
    }
  });
});
