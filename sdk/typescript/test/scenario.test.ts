// The shared SDK scenario against a real aep binary, over every transport:
// handshake, tool list and a streaming tool call, memory store and recall,
// an env episode to termination, a toolkit configure error, a cancelled
// call and protocol errors.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { AepClient, AepError, ConnectionError, type EventMessage, type HostMessage } from "../src/index.js";
import { aepBinary, dataDir, startNetHost, token, type NetHost } from "./host.js";

const bin = aepBinary();

interface Transport {
  name: string;
  open(): Promise<AepClient>;
}

let net: NetHost | undefined;
const transports: Transport[] = [
  { name: "stdio", open: async () => AepClient.stdio(bin!, ["serve", "--stdio", "--data-dir", dataDir()], { env: { ...process.env, AEP_AUTH_TOKEN: token } }) },
  { name: "websocket", open: () => AepClient.websocket(net!.base.replace(/^http/, "ws") + "/ws") },
  { name: "http+sse", open: () => AepClient.http(net!.base) },
];

before(async () => {
  if (bin) net = await startNetHost(bin);
});
after(async () => {
  await net?.stop();
});

for (const tr of transports) {
  describe(`scenario over ${tr.name}`, { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
    let c: AepClient;
    before(async () => {
      c = await tr.open();
    });
    after(async () => {
      await c.shutdown();
      await c.close();
    });

    test("handshake", async () => {
      const hs = await c.connect({ agentId: "ts-sdk-test", token, caps: ["tools", "memory", "env", "toolkits"] });
      assert.equal(hs.ok, true);
      assert.deepEqual(
        hs.accepted_caps.map((e) => [e.name, e.enabled]),
        [["tools", true], ["memory", true], ["env", true], ["toolkits", true]],
      );
      assert.ok(hs.max_parallel > 0);
      assert.ok(hs.session_id);
      assert.equal(c.sessionId, hs.session_id);
    });

    test("a wrong token is refused with AepError unauthorized", async () => {
      const other = await tr.open();
      try {
        await assert.rejects(other.connect({ agentId: "intruder", token: "wrong" }), (e: unknown) => {
          assert.ok(e instanceof AepError);
          assert.equal(e.code, "unauthorized");
          assert.equal(e.retryable, false);
          return true;
        });
      } finally {
        await other.close();
      }
    });

    test("tool list and a streaming call: events by callback and by async iterator", async () => {
      const list = await c.toolList();
      const names = list.tools.map((t) => t.name);
      assert.ok(names.includes("run_command"), `run_command missing from ${names.join(", ")}`);

      const seen: EventMessage[] = [];
      const resp = await c.toolCall(
        { tool_name: "run_command", streaming: true, arguments: { argv: ["sh", "-c", "echo a; echo b; echo c"] } },
        { onEvent: (e) => seen.push(e) },
      );
      assert.equal(resp.result.success, true);
      assert.deepEqual(
        seen.map((e) => [e.type, e.seq, e.kind, e.data.message]),
        [["tool/event", 0, "log", "a"], ["tool/event", 1, "log", "b"], ["tool/event", 2, "log", "c"]],
      );

      const s = c.stream("tool/call/req", { tool_name: "run_command", streaming: true, arguments: { argv: ["sh", "-c", "echo x; echo y"] } });
      const messages: string[] = [];
      for await (const e of s.events) {
        assert.equal(e.type, "tool/event");
        messages.push(String(e.data.message));
      }
      assert.deepEqual(messages, ["x", "y"]);
      const r = await s.reply;
      assert.equal(r.result.tool_name, "run_command");
      assert.deepEqual(r.result.data, { exit_code: 0, stdout: "x\ny\n", stderr: "", truncated: false });
    });

    test("memory store and recall", async () => {
      const mem = await c.memoryInit();
      assert.equal(mem.success, true);
      const stored = await c.memoryStore({
        memory_id: mem.memory_id,
        entries: [
          { key: "sky", content: "the sky is blue", tier: "semantic" },
          { key: "grass", content: "the grass is green", tier: "semantic" },
        ],
      });
      assert.equal(stored.type, "memory/store/resp");
      const recalled = await c.memoryRecall({ memory_id: mem.memory_id, query: "sky" });
      assert.deepEqual(
        recalled.hits.map((h) => [h.entry.key, h.entry.content]),
        [["sky", "the sky is blue"]],
      );
    });

    test("an env episode to termination", async () => {
      const reset = await c.envReset({ env_name: "guess", seed: 7, options: { high: 100, max_steps: 20 } });
      let lo = 0;
      let hi = 100;
      let last;
      for (let i = 0; i < 20; i++) {
        const guess = Math.floor((lo + hi) / 2);
        last = await c.envStep({ episode_id: reset.episode_id, action: guess });
        const hint = (last.observation as { hint: number }).hint;
        if (last.terminated || last.truncated) break;
        if (hint < 0) hi = guess;
        else lo = guess + 1;
      }
      assert.ok(last);
      assert.equal(last.terminated, true);
      assert.equal(last.truncated, false);
      assert.equal(last.reward, 1);
      // Stepping a finished episode is an error of the contract's catalogue.
      await assert.rejects(c.envStep({ episode_id: reset.episode_id, action: 0 }), AepError);
    });

    test("a toolkit configure error", async () => {
      const resp = await c.toolkitConfigure({ toolkit_name: "sql", config: { driver: "sqlite" } });
      assert.equal(resp.status, "error");
      assert.match(resp.message, /missing required fields/);
    });

    test("a cancelled call rejects with AepError cancelled", async () => {
      const ac = new AbortController();
      const call = c.toolCall(
        { tool_name: "run_command", streaming: true, arguments: { argv: ["sh", "-c", "echo started; sleep 60"] } },
        { signal: ac.signal, onEvent: () => ac.abort() },
      );
      await assert.rejects(call, (e: unknown) => {
        assert.ok(e instanceof AepError, String(e));
        assert.equal(e.code, "cancelled");
        assert.equal(e.retryable, false);
        return true;
      });
      // The session is still usable.
      assert.equal((await c.ping()).type, "pong");
    });

    test("a request carries the caller's trace context (envelope traceparent)", async () => {
      // schemas/envelope.json: the host's spans of the request join this
      // trace; a host that does not trace (or know the field) answers as usual.
      const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
      const r = await c.toolCall({ tool_name: "no_such_tool", arguments: {} }, { traceparent });
      assert.equal(r.result.error_code, "UNKNOWN_TOOL");
      assert.equal((await c.ping({}, { traceparent })).type, "pong");
    });

    test("protocol errors: a schema violation and a line that is not JSON", async () => {
      // A request missing a required field, past the types on purpose.
      await assert.rejects(c.request("tool/call/req", {} as never), (e: unknown) => {
        assert.ok(e instanceof AepError);
        assert.equal(e.code, "schema_violation");
        assert.equal(e.retryable, false);
        assert.deepEqual(e.detail, { field: "tool_name" });
        return true;
      });
      // A capability the session did not ask for.
      await assert.rejects(c.procList(), (e: unknown) => e instanceof AepError && e.code === "capability_missing");
      // A broken line names no request: its error reaches onStray.
      const stray = new Promise<HostMessage>((resolve) => {
        const stop = c.onStray((m) => {
          stop();
          resolve(m);
        });
      });
      await c.sendLine("{not json");
      const m = await stray;
      assert.equal(m.type, "error");
      if (m.type === "error") {
        assert.equal(m.code, "parse_error");
        assert.equal(m.retryable, false);
      }
    });

    test("after close, requests fail with ConnectionError", async () => {
      const other = await tr.open();
      await other.connect({ agentId: "closer", token });
      await other.close();
      await assert.rejects(other.ping(), ConnectionError);
    });

    if (tr.name !== "stdio") {
      test("close ends the session on the host", async () => {
        const other = await tr.open();
        await other.connect({ agentId: "closer", token });
        const sid = other.sessionId!;
        await other.close();
        // The host no longer has it: its id is answered 404, at once
        // rather than after its idle timeout or re-attach grace.
        const ping = JSON.stringify({ type: "ping", id: "p", proto: "1.0", ts: Date.now() / 1000 });
        let status = 0;
        for (let i = 0; i < 100 && status !== 404; i++) {
          status = (await fetch(net!.base + "/send", { method: "POST", headers: { "X-Session-Id": sid, "Content-Type": "application/json" }, body: ping })).status;
          if (status !== 404) await new Promise((r) => setTimeout(r, 20));
        }
        assert.equal(status, 404);
      });
    }
  });
}
