// A stdio client's host against a real aep binary: it takes the token given
// in code (connect's) from its environment, never its argv, and its logs
// are discarded unless the caller says where they go.
import assert from "node:assert/strict";
import { readFileSync, readlinkSync } from "node:fs";
import { PassThrough } from "node:stream";
import { afterEach, beforeEach, describe, test } from "node:test";
import { AepClient, AepError, ConnectionError, spawnStdio } from "../src/index.js";
import { aepBinary, dataDir, token } from "./host.js";

const bin = aepBinary();

/** The host's AEP_AUTH_TOKEN entries, and whether its argv holds the token. */
function hostToken(pid: number): { env: string[]; inArgv: boolean } {
  const env = readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").filter((kv) => kv.startsWith("AEP_AUTH_TOKEN="));
  return { env, inArgv: readFileSync(`/proc/${pid}/cmdline`, "latin1").includes(token) };
}

describe("stdio host token and logs", { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
  let saved: string | undefined;
  beforeEach(() => {
    saved = process.env.AEP_AUTH_TOKEN;
    delete process.env.AEP_AUTH_TOKEN;
  });
  afterEach(() => {
    if (saved === undefined) delete process.env.AEP_AUTH_TOKEN;
    else process.env.AEP_AUTH_TOKEN = saved;
  });

  test("AepClient.stdio: the host accepts the token given to connect, with AEP_AUTH_TOKEN unset", async () => {
    const c = AepClient.stdio(bin!, ["serve", "--stdio", "--data-dir", dataDir()]);
    const hs = await c.connect({ agentId: "ts-stdio", token, caps: ["tools"] });
    assert.equal(hs.ok, true);
    assert.ok((await c.toolList({})).tools.length > 0);
    await c.shutdown();
    await c.close();
  });

  test("in its environment, once, not in its argv; logs discarded", async () => {
    process.env.AEP_AUTH_TOKEN = "not-" + token; // ours: replaced by the code's
    const tr = spawnStdio(bin!, ["serve", "--stdio", "--data-dir", dataDir()]);
    assert.equal(tr.process, undefined, "the host starts with the handshake");
    const c = new AepClient(tr);
    await c.connect({ agentId: "ts-stdio", token, caps: ["tools"] });
    const pid = tr.process!.pid!;
    assert.deepEqual(hostToken(pid), { env: [`AEP_AUTH_TOKEN=${token}`], inArgv: false });
    assert.equal(readlinkSync(`/proc/${pid}/fd/2`), "/dev/null");
    await c.shutdown();
    await c.close();
  });

  test("a token the caller puts in env is the host's", async () => {
    const c = AepClient.stdio(bin!, ["serve", "--stdio", "--data-dir", dataDir()], { env: { ...process.env, AEP_AUTH_TOKEN: "the-hosts-own" } });
    await assert.rejects(c.connect({ agentId: "ts-stdio", token }), (e: unknown) => e instanceof AepError && e.code === "unauthorized");
    await c.close();
  });

  test("logs go to a stream the caller passes", async () => {
    const logs = new PassThrough();
    const chunks: Buffer[] = [];
    logs.on("data", (b: Buffer) => chunks.push(b));
    const c = AepClient.stdio(bin!, ["serve", "--stdio", "--data-dir", dataDir()], { stderr: logs });
    await c.connect({ agentId: "ts-stdio", token });
    await c.ping({});
    await c.shutdown();
    await c.close();
    assert.match(Buffer.concat(chunks).toString(), /stdio session started/);
  });

  test("closed before the handshake: no process, a ConnectionError", async () => {
    const tr = spawnStdio(bin!, ["serve", "--stdio", "--data-dir", dataDir()]);
    const c = new AepClient(tr);
    await c.close();
    assert.equal(tr.process, undefined);
    await assert.rejects(c.ping({}), (e: unknown) => e instanceof ConnectionError);
  });
});
