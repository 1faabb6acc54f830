// AepClient.fork against a real aep binary, over WebSocket and HTTP: the
// forks start with the parent's working memory, episode and files, what
// one fork does stays its own, and the parent is unchanged.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { AepClient } from "../src/index.js";
import { aepBinary, dataDir, startNetHost, token, type NetHost } from "./host.js";

const bin = aepBinary();
const caps = ["tools", "memory", "env"];
let net: NetHost | undefined;

before(async () => {
  if (bin) net = await startNetHost(bin);
});
after(async () => {
  await net?.stop();
});

interface State {
  goal: unknown;
  step: number;
  observation: unknown;
  file: unknown;
}

async function stateOf(c: AepClient, memoryId: string, episodeId: string): Promise<State> {
  const r = await c.memoryRetrieve({ memory_id: memoryId, keys: ["goal"] });
  const o = await c.envObserve({ episode_id: episodeId });
  const f = await c.toolCall({ tool_name: "read_file", arguments: { path: "plan.txt" } });
  return { goal: r.entries[0]?.content, step: o.step, observation: o.observation, file: (f.result.data as { content?: string }).content };
}

const opens: [string, () => Promise<AepClient>][] = [
  ["websocket", () => AepClient.websocket(net!.base.replace(/^http/, "ws") + "/ws")],
  ["http+sse", () => AepClient.http(net!.base)],
];

for (const [name, open] of opens) {
  describe(`fork over ${name}`, { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
    test("forks share the parent's state at the fork, diverge after, and leave the parent unchanged", async () => {
      const parent = await open();
      try {
        await parent.connect({ agentId: "ts-fork-test", token, caps });
        const mem = await parent.memoryInit();
        await parent.memoryStore({ memory_id: mem.memory_id, entries: [{ key: "goal", tier: "working", content: "parent goal" }] });
        const reset = await parent.envReset({ env_name: "guess", seed: 7 });
        await parent.envStep({ episode_id: reset.episode_id, action: 50 });
        await parent.toolCall({ tool_name: "write_file", arguments: { path: "plan.txt", content: "parent plan" } });
        const before = await stateOf(parent, mem.memory_id, reset.episode_id);
        assert.deepEqual([before.goal, before.step, before.file], ["parent goal", 1, "parent plan"]);

        const forks = await parent.fork(2);
        try {
          assert.equal(forks.clients.length, 2);
          for (const [i, c] of forks.clients.entries()) {
            assert.equal(c.sessionId, forks.reply.forks[i]!.session_id);
            assert.notEqual(c.sessionId, parent.sessionId);
            assert.deepEqual(await stateOf(c, mem.memory_id, reset.episode_id), before);
          }
          const [a, b] = forks.clients as [AepClient, AepClient];
          await a.memoryStore({ memory_id: mem.memory_id, entries: [{ key: "goal", tier: "working", content: "fork goal" }] });
          await a.envStep({ episode_id: reset.episode_id, action: 25 });
          await a.toolCall({ tool_name: "write_file", arguments: { path: "plan.txt", content: "fork plan" } });
          const moved = await stateOf(a, mem.memory_id, reset.episode_id);
          assert.deepEqual([moved.goal, moved.step, moved.file], ["fork goal", 2, "fork plan"]);
          assert.deepEqual(await stateOf(b, mem.memory_id, reset.episode_id), before);
          assert.deepEqual(await stateOf(parent, mem.memory_id, reset.episode_id), before);
        } finally {
          await forks.close();
        }
      } finally {
        await parent.close();
      }
    });

    test("a fork whose handshake is refused rejects and closes the others", async () => {
      const parent = await open();
      try {
        await parent.connect({ agentId: "ts-fork-test", token, caps });
        await assert.rejects(parent.fork(2, { handshake: { agentId: "ts-fork-test", token: "wrong", caps } }), /unauthorized|handshake/i);
      } finally {
        await parent.close();
      }
    });
  });
}

describe("fork over stdio", { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
  test("is refused: a stdio host serves one session", async () => {
    const c = AepClient.stdio(bin!, ["serve", "--stdio", "--data-dir", dataDir()], { env: { ...process.env, AEP_AUTH_TOKEN: token } });
    try {
      await assert.rejects(c.fork(1), /connect first/);
      await c.connect({ agentId: "ts-fork-test", token, caps });
      await assert.rejects(c.fork(1), /cannot reach another session/);
    } finally {
      await c.close();
    }
  });
});
