// Sessions the operator opens and terminates through the host's admin API
// (docs/operating.md, Admin API), as the SDK meets them: an
// operator-opened session is attached by its id with the token the host
// issued for it alone (no tenant secret) and says so in session/info; a
// terminated session's next request fails with reason terminated, and a
// client made with { move: true } ends instead of moving it (the Go twin
// is client/terminate_test.go, the Python one tests/test_admin.py).
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { AepClient, AepError, SessionTerminatedError } from "../src/index.js";
import { aepBinary, dataDir, freePort, startNetHost, token, type NetHost } from "./host.js";

const bin = aepBinary();
const opToken = "ts-sdk-operator-token-4d17";

describe("admin API", { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
  let host: NetHost;
  let ops: string;
  before(async () => {
    const port = await freePort();
    ops = `http://127.0.0.1:${port}`;
    const cfg = path.join(dataDir(), "aep.yaml");
    writeFileSync(cfg, `operator:\n  listen: 127.0.0.1:${port}\n  token: ${opToken}\n`);
    host = await startNetHost(bin!, ["--config", cfg]);
  });
  after(() => host?.stop());

  async function admin(method: string, p: string, body?: unknown): Promise<Record<string, unknown>> {
    const r = await fetch(ops + p, {
      method,
      headers: { Authorization: `Bearer ${opToken}`, "Content-Type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    assert.ok(r.ok, `${method} ${p}: HTTP ${r.status}`);
    return (await r.json()) as Record<string, unknown>;
  }

  const wsUrl = () => host.base.replace(/^http/, "ws") + "/ws";
  const open = (kind: string, opts: Record<string, unknown>) =>
    kind === "websocket" ? AepClient.websocket(wsUrl(), opts) : AepClient.http(host.base, opts);

  for (const kind of ["websocket", "http"]) {
    test(`${kind}: an operator-opened session needs no tenant secret and is marked in session/info`, async (t) => {
      const o = await admin("POST", "/admin/sessions", { tenant: "default", capabilities: ["tools"] });
      assert.notEqual(o.token, token);
      const c = await open(kind, { sessionId: o.session_id as string });
      t.after(() => c.close());
      await c.connect({ agentId: "ts-op", token: o.token as string, caps: ["tools", "memory", "session"] });
      const info = await c.request("session/info/req", {});
      assert.equal(info.operator_opened, true);
      assert.equal(info.handle, o.handle);
      assert.deepEqual(Object.fromEntries(info.accepted_caps.map((e) => [e.name, e.enabled])), { tools: true, memory: false, session: true });
      const own = await open(kind, {});
      t.after(() => own.close());
      await own.connect({ agentId: "ts-own", token, caps: ["session"] });
      assert.equal((await own.request("session/info/req", {})).operator_opened, undefined);
    });

    test(`${kind}: a terminated session is not moved`, async (t) => {
      const c = await open(kind, { move: true });
      t.after(() => c.close());
      await c.connect({ agentId: "ts-term", token, caps: ["tools", "session"] });
      const handle = (await c.request("session/info/req", {})).handle;
      await admin("POST", `/admin/sessions/${handle}/snapshot`); // what a move would restore
      await admin("POST", `/admin/sessions/${handle}/terminate`);
      await assert.rejects(c.request("ping", {}), (e: unknown) => {
        if (e instanceof AepError) return e.code === "runtime_error" && (e.detail as { reason?: string }).reason === "terminated" && !e.retryable;
        return e instanceof SessionTerminatedError;
      });
      await assert.rejects(c.request("ping", {}), SessionTerminatedError);
      assert.deepEqual(c.moves, []);
    });
  }
});
