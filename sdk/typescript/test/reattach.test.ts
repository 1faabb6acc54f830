// A WebSocket connection that drops is re-attached to its session
// (docs/transports.md), with a real `aep serve` behind a TCP forwarder that
// cuts every connection as a network drop would (no close frame): a
// streaming call in flight gets every event once, in order, and its reply
// (what came while no connection was there is replayed, by the count of
// messages received), the session stays the same, a call made between
// drops or while the network is still down goes out on the new connection.
// A host that no longer has the session (404), the re-attach timeout, and a
// close the host sent itself end the client with SessionLostError.
import assert from "node:assert/strict";
import { after, before, describe, test, type TestContext } from "node:test";
import { AepClient, openWebSocket, SessionLostError, type EventMessage, type WebSocketOptions, type WebSocketTransport } from "../src/index.js";
import { Forwarder } from "./fleet.js";
import { aepBinary, startNetHost, token, type NetHost } from "./host.js";

const bin = aepBinary();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls cond every 10 ms until it holds, or fails after ms. */
async function until(cond: () => boolean, what: string, ms = 10_000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** What run_command printed. */
function stdout(r: { result: { data?: unknown } }): unknown {
  return (r.result.data as { stdout?: unknown } | undefined)?.stdout;
}

function portOf(h: NetHost): number {
  return Number(new URL(h.base).port);
}

describe("websocket re-attach", { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
  let host: NetHost;
  before(async () => {
    host = await startNetHost(bin!);
  });
  after(() => host?.stop());

  /** A handshaken client behind a forwarder of its own, both torn down after the test. */
  async function open(t: TestContext, opts: WebSocketOptions = {}): Promise<{ c: AepClient; tr: WebSocketTransport; fwd: Forwarder }> {
    const fwd = await Forwarder.start(portOf(host));
    t.after(() => fwd.close());
    const tr = await openWebSocket(fwd.wsUrl, opts);
    const c = new AepClient(tr);
    t.after(() => c.close());
    await c.connect({ agentId: "ts-reattach", token, caps: ["tools"] });
    return { c, tr, fwd };
  }

  test("drops during a call and between calls re-attach to the same session; nothing is lost or repeated", async (t) => {
    const { c, tr, fwd } = await open(t);
    const sid = c.sessionId;
    assert.ok(sid);

    // Two drops while a streaming call runs: its events on either side of
    // them, and those sent while no connection was there, arrive once each,
    // in order.
    const seen: EventMessage[] = [];
    const call = c.toolCall(
      { tool_name: "run_command", streaming: true, arguments: { argv: ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 0.15; done"] } },
      { onEvent: (e) => seen.push(e) },
    );
    await until(() => seen.length >= 2, "the call's first events");
    assert.ok(fwd.sever() >= 1);
    await until(() => tr.reattached === 1, "the first re-attach");
    await until(() => seen.length >= 4, "events after the first re-attach");
    // The second time the network stays down while the call prints: what
    // it sends meanwhile can only come from the host's replay.
    fwd.refuse = true;
    assert.ok(fwd.sever() >= 1);
    const before = seen.length;
    await sleep(400);
    assert.equal(seen.length, before);
    fwd.refuse = false;
    const r = await call;
    assert.equal(r.result.success, true);
    assert.equal(stdout(r), "1\n2\n3\n4\n5\n6\n7\n8\n");
    assert.deepEqual(
      seen.map((e) => [e.seq, e.data.message]),
      ["1", "2", "3", "4", "5", "6", "7", "8"].map((m, i) => [i, m]),
    );
    assert.equal(tr.reattached, 2);
    assert.equal(c.sessionId, sid);

    // A drop between calls: the next call goes out on the new connection.
    fwd.sever();
    await until(() => tr.reattached === 3, "the re-attach between calls");
    const again = await c.toolCall({ tool_name: "run_command", arguments: { argv: ["echo", "again"] } });
    assert.equal(stdout(again), "again\n");

    // A call made while the network is still down is not written to the
    // dead connection: it waits for the re-attach and goes out then.
    fwd.refuse = true;
    fwd.sever();
    await sleep(200); // the client has seen the drop and tries in vain
    const waiting = c.toolCall({ tool_name: "run_command", arguments: { argv: ["echo", "waited"] } });
    await sleep(300);
    assert.equal(tr.reattached, 3);
    fwd.refuse = false;
    const waited = await waiting;
    assert.equal(stdout(waited), "waited\n");
    assert.equal(tr.reattached, 4);
    assert.equal(c.sessionId, sid);
    assert.equal(c.closedReason, undefined);
  });

  test("on a live connection the idle check passes: calls made at once after a pause are all answered, and nothing is re-attached", { timeout: 20_000 }, async (t) => {
    const { c, tr } = await open(t, { idleCheckSeconds: 0.1 });
    const sid = c.sessionId;
    for (let round = 0; round < 2; round++) {
      await sleep(300); // idle past the check: the first call pings, the others wait for its pong
      const rs = await Promise.all(["a", "b", "c"].map((w) => c.toolCall({ tool_name: "run_command", arguments: { argv: ["echo", w] } })));
      assert.deepEqual(rs.map(stdout), ["a\n", "b\n", "c\n"]);
    }
    assert.equal(tr.reattached, 0);
    assert.equal(c.sessionId, sid);
  });

  // A connection lost while the client was idle, unnoticed (the forwarder
  // holds the client's side open and loses whatever comes next), with the
  // host alive. With the idle check what is lost is the check's ping: the
  // call waits, the connection is re-attached, and the call goes out on
  // the new one and is answered. With the check off the call itself is
  // lost with the connection, and nothing ever answers it.
  for (const { name, idleCheckSeconds, answered } of [
    { name: "a call after an idle spell on a connection lost unnoticed goes out on the re-attached connection", idleCheckSeconds: 0.1, answered: true },
    { name: "with the idle check off, such a call is lost with the connection", idleCheckSeconds: 0, answered: false },
  ]) {
    // Bounded: a call written into the lost connection would wait forever.
    test(name, { timeout: 20_000 }, async (t) => {
      const { c, tr, fwd } = await open(t, { idleCheckSeconds });
      const sid = c.sessionId;
      await sleep(300); // idle past the check
      assert.equal(fwd.loseUnnoticed(), 1);
      const call = c.toolCall({ tool_name: "run_command", arguments: { argv: ["echo", "checked"] } });
      if (answered) {
        assert.equal(stdout(await call), "checked\n");
      } else {
        call.catch(() => {}); // rejects as the client closes
        const got = await Promise.race([call.then(() => "answered"), sleep(2000).then(() => "no answer")]);
        assert.equal(got, "no answer");
      }
      assert.equal(tr.reattached, 1);
      assert.equal(c.sessionId, sid);
      assert.equal(c.closedReason, undefined);
    });
  }

  test("an idle check's ping unanswered for 10 s takes the connection for dead: the call goes out on the re-attached connection", { timeout: 30_000 }, async (t) => {
    const { c, tr, fwd } = await open(t, { idleCheckSeconds: 0.1 });
    const sid = c.sessionId;
    await sleep(300); // idle past the check
    // Open, and silent: whatever the client sends is lost, nothing comes back.
    assert.equal(fwd.loseUnnoticed({ keep: true }), 1);
    const started = Date.now();
    const r = await c.toolCall({ tool_name: "run_command", arguments: { argv: ["echo", "after the timeout"] } });
    const took = Date.now() - started;
    assert.equal(stdout(r), "after the timeout\n");
    assert.ok(took >= 9_900 && took < 20_000, `answered after ${took} ms`);
    assert.equal(tr.reattached, 1);
    assert.equal(c.sessionId, sid);
  });

  test("a host that no longer has the session ends the client with SessionLostError", async (t) => {
    const { c, tr, fwd } = await open(t);
    const other = await startNetHost(bin!);
    t.after(() => other.stop());
    const ended = new Promise<Error>((resolve) => c.onClose(resolve));
    fwd.target = portOf(other); // the re-attach reaches a host without the session: 404
    fwd.sever();
    const err = await ended;
    assert.ok(err instanceof SessionLostError, String(err));
    assert.match(err.message, /no longer has the session \(HTTP 404\)/);
    assert.equal(tr.reattached, 0);
    await assert.rejects(c.ping(), SessionLostError);
  });

  test("a drop that outlasts reattachTimeoutSeconds ends the client; the call in flight rejects", async (t) => {
    const { c, tr, fwd } = await open(t, { reattachTimeoutSeconds: 1 });
    const call = c.toolCall({ tool_name: "run_command", arguments: { argv: ["sleep", "5"] } });
    await sleep(200); // the host has it and runs it
    fwd.refuse = true;
    const started = Date.now();
    fwd.sever();
    await assert.rejects(call, (e: unknown) => e instanceof SessionLostError && /could not be re-attached in 1s/.test(e.message));
    const took = Date.now() - started;
    assert.ok(took >= 900 && took < 5000, `gave up after ${took} ms`);
    assert.equal(tr.reattached, 0);
    assert.ok(c.closedReason instanceof SessionLostError);
  });

  test("a connection the host closes itself is not re-attached", async (t) => {
    const { c, tr } = await open(t);
    const ended = new Promise<Error>((resolve) => c.onClose(resolve));
    await c.shutdown(); // the host ends the session and sends a close frame
    const err = await ended;
    assert.ok(err instanceof SessionLostError, String(err));
    assert.match(err.message, /websocket closed \(\d+/);
    assert.equal(tr.reattached, 0);
  });
});
