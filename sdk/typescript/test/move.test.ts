// A client made with { move: true } survives its host's drain
// (docs/deploy.md, How a client survives a drain), with real `aep serve`
// hosts sharing one store: host A is drained (SIGTERM,
// operator.snapshot_on_drain) while the client holds a working-memory entry
// and a request is in flight; the forwarder, standing in for the proxy,
// then sends everything to host B. The request in flight rejects with
// RequestInterruptedError; the next call opens a new session on B,
// restores the old one from its id and finds the entry; a second drain
// moves it on again, from the newest id. A host that drains without a
// snapshot ends the client with MoveFailedError (NoSnapshotError) unless it
// asked for moveFresh. Without move the client fails as before. Over
// HTTP+SSE and WebSocket, on a SQLite file and (HTTP) on PostgreSQL.
import assert from "node:assert/strict";
import { describe, test, type TestContext } from "node:test";
import { AepClient, AepError, ConnectionError, MoveFailedError, NoSnapshotError, PointGapError, RequestInterruptedError, spawnStdio, type ClientOptions, type Move, type WebSocketOptions } from "../src/index.js";
import { Forwarder, pgStore, sqliteStore, startFleetHost, type FleetHost, type Store } from "./fleet.js";
import { aepBinary, dataDir, token } from "./host.js";

const bin = aepBinary();
const caps = ["memory", "tools"];

/** Hosts on one store behind one forwarder, torn down after the test. */
class Fleet {
  readonly hosts: FleetHost[] = [];
  fwd: Forwarder | undefined;
  constructor(readonly store: Store) {}

  // One at a time: hosts starting at once would migrate a SQLite store
  // concurrently (PostgreSQL takes a lock, SQLite does not).
  async host(hostId: string, opts: { snapshotOnDrain?: boolean } = {}): Promise<FleetHost> {
    const h = await startFleetHost(bin!, hostId, this.store.dsn, opts);
    this.hosts.push(h);
    this.fwd ??= await Forwarder.start(h.port);
    return h;
  }

  async close() {
    for (const h of this.hosts) await h.stop();
    await this.fwd?.close();
    this.store.close();
  }
}

async function fleetFor(t: TestContext, store: Store): Promise<Fleet> {
  const f = new Fleet(store);
  t.after(() => f.close());
  return f;
}

async function open(kind: string, fwd: Forwarder, opts: ClientOptions & Pick<WebSocketOptions, "reattachTimeoutSeconds"> = {}): Promise<AepClient> {
  const c = kind === "http" ? await AepClient.http(fwd.base, opts) : await AepClient.websocket(fwd.wsUrl, opts);
  await c.connect({ agentId: "ts-move", token, caps });
  return c;
}

async function working(c: AepClient, memoryId: string, ...keys: string[]): Promise<Record<string, unknown>> {
  const r = await c.memoryRetrieve({ memory_id: memoryId, keys, tier: "working" });
  return Object.fromEntries(r.entries.map((e) => [e.key, e.content]));
}

function store(c: AepClient, memoryId: string, key: string, content: string) {
  return c.memoryStore({ memory_id: memoryId, entries: [{ key, content, tier: "working" }] });
}

/** A call still running when its host's drain times out; `settled` has the error it gets (wrapped: an async function would wait for a promise it returns). */
async function inFlight(c: AepClient): Promise<{ settled: Promise<unknown> }> {
  const settled = c.toolCall({ tool_name: "run_command", arguments: { argv: ["sleep", "30"] } }).then(
    (r: unknown) => new Error(`the call in flight was answered: ${JSON.stringify(r)}`),
    (e: unknown) => e,
  );
  await new Promise((r) => setTimeout(r, 300)); // the host has it and runs it
  return { settled };
}

async function movesOnDrain(t: TestContext, kind: string, st: Store) {
  const fleet = await fleetFor(t, st);
  const a = await fleet.host("ts-a");
  const b = await fleet.host("ts-b");
  const c = await open(kind, fleet.fwd!, { move: true });
  t.after(() => c.close());
  const seen: Move[] = [];
  c.onMove((m) => seen.push(m));
  const first = c.sessionId!;
  assert.match(first, /^s-ts-a-/);
  const mid = (await c.memoryInit({ namespace: "move" })).memory_id;
  await store(c, mid, "plan", "step 1");
  const call = await inFlight(c);

  await a.drain();
  fleet.fwd!.target = b.port; // the proxy sends a gone host's session to the pool

  const err = await call.settled;
  assert.ok(err instanceof RequestInterruptedError, `in flight: ${String(err)}`);
  assert.ok(err instanceof ConnectionError);
  assert.equal(err.sessionId, first);
  assert.match(err.message, /may or may not have run/);

  // The next call moves: a new session on B with A's working memory.
  assert.deepEqual(await working(c, mid, "plan"), { plan: "step 1" });
  const second = c.sessionId!;
  assert.match(second, /^s-ts-b-/);
  assert.equal(seen.length, 1);
  assert.deepEqual([seen[0]!.fromSession, seen[0]!.sessionId, seen[0]!.fresh, seen[0]!.error], [first, second, false, undefined]);
  assert.match(seen[0]!.snapshotId ?? "", /^sql-/);
  assert.ok(seen[0]!.restored.includes("memory.builtin"), seen[0]!.restored.join(","));
  // The drain's snapshot covers everything acknowledged: memory/init and
  // memory/store (the call in flight was cancelled: no point).
  assert.deepEqual([seen[0]!.lastPoint, seen[0]!.point, seen[0]!.gap, c.point], [2, 2, undefined, 2]);
  assert.deepEqual(c.moves, seen);

  // A second drain moves on from the newest id: B's session, which holds
  // what was written on B as well.
  await store(c, mid, "plan2", "step 2");
  const c2 = await fleet.host("ts-c");
  await b.drain();
  fleet.fwd!.target = c2.port;
  // The client moves by itself once it sees the drained host's connection
  // end. Waited for: drain() resolves when B's process exits, which this
  // process may learn before the forwarder's close of the client's side
  // reaches the client, and a request written in between (on a connection
  // busy a moment ago, so not idle-checked) is in flight when the session
  // is found lost: interrupted, as the README says of a busy connection.
  for (const until = Date.now() + 20_000; seen.length < 2 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(await working(c, mid, "plan", "plan2"), { plan: "step 1", plan2: "step 2" });
  assert.equal(seen.length, 2);
  assert.equal(seen[1]!.fromSession, second);
  assert.equal(seen[1]!.fresh, false);
  assert.equal(seen[1]!.error, undefined);
  assert.match(c.sessionId!, /^s-ts-c-/);
  const r = await c.toolCall({ tool_name: "run_command", arguments: { argv: ["echo", "ok"] } });
  assert.equal(r.result.success, true);
}

/**
 * A client on host A, which drains without snapshotting, holding a
 * working-memory entry; the forwarder then sends it to host B.
 */
async function drainWithoutSnapshot(t: TestContext, kind: string, opts: ClientOptions): Promise<{ c: AepClient; first: string; mid: string }> {
  const fleet = await fleetFor(t, sqliteStore());
  const a = await fleet.host("ts-a", { snapshotOnDrain: false });
  const b = await fleet.host("ts-b");
  const c = await open(kind, fleet.fwd!, { move: true, snapshotWaitSeconds: 0.5, ...opts });
  t.after(() => c.close());
  const first = c.sessionId!;
  const mid = (await c.memoryInit({})).memory_id;
  await store(c, mid, "plan", "lost");
  await a.drain();
  fleet.fwd!.target = b.port;
  return { c, first, mid };
}

/**
 * A client on host A takes a snapshot, then writes once more; A dies
 * (SIGKILL) and the forwarder sends the client to host B.
 */
async function killedAfterSnapshot(t: TestContext, kind: string, opts: ClientOptions): Promise<{ c: AepClient; mid: string }> {
  const fleet = await fleetFor(t, sqliteStore());
  const a = await fleet.host("ts-a");
  const b = await fleet.host("ts-b");
  const c = await open(kind, fleet.fwd!, { move: true, snapshotWaitSeconds: 0.5, ...opts });
  t.after(() => c.close());
  const mid = (await c.memoryInit({})).memory_id;
  await store(c, mid, "plan", "saved");
  assert.equal(c.point, 2);
  const snap = await c.sessionSnapshot({ target: "sql" });
  assert.equal(snap.covers_point, 2);
  await store(c, mid, "plan2", "acknowledged, in no snapshot");
  assert.equal(c.point, 3);
  await a.stop();
  fleet.fwd!.target = b.port;
  // The next request finds the session gone (over HTTP perhaps as an
  // interrupted request: its connection dropped) and the client moves.
  const moved = new Promise<Move>((resolve) => c.onMove(resolve));
  await c.ping().catch(() => {});
  await moved;
  return { c, mid };
}

for (const kind of ["http", "websocket"]) {
  describe(`points over ${kind}`, { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
    test("never a silent rollback: a snapshot older than the last seen point ends the client", async (t) => {
      const { c } = await killedAfterSnapshot(t, kind, {});
      const err = await c.ping().then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof MoveFailedError, String(err));
      assert.ok(err.cause instanceof PointGapError, String(err.cause));
      assert.match(err.message, /point_gap/);
      assert.deepEqual([err.cause.detail.point, err.cause.detail.last_point, err.cause.detail.lost], [2, 3, 1]);
      assert.equal(c.moves.length, 1);
      assert.ok(c.moves[0]!.error instanceof PointGapError);
      assert.equal(c.moves[0]!.lastPoint, 3);
    });

    test("acceptGap restores the older snapshot and says what was lost", async (t) => {
      const { c, mid } = await killedAfterSnapshot(t, kind, { acceptGap: true });
      assert.deepEqual(await working(c, mid, "plan", "plan2"), { plan: "saved" });
      assert.equal(c.moves.length, 1);
      const m = c.moves[0]!;
      assert.equal(m.error, undefined);
      assert.deepEqual([m.gap?.point, m.gap?.last_point, m.gap?.lost, m.lastPoint, m.point, c.point], [2, 3, 1, 3, 2, 2]);
    });
  });

  describe(`move over ${kind}`, { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
    test("a drained host's session moves and is restored; a request in flight is interrupted; a second move chains", (t) =>
      movesOnDrain(t, kind, sqliteStore()));

    test("a session that left no snapshot ends the client", async (t) => {
      const { c, first, mid } = await drainWithoutSnapshot(t, kind, {});
      // The move opens a session on B, the restore finds nothing
      // (not_found) for snapshotWaitSeconds, and without moveFresh
      // the move fails: the client ends rather than go on without its state.
      const err = await c.ping().then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof MoveFailedError, String(err));
      assert.match(err.message, /the lost session left no snapshot \(no_snapshot\)/);
      assert.ok(err.cause instanceof NoSnapshotError, String(err.cause));
      assert.equal(c.moves.length, 1);
      const m = c.moves[0]!;
      assert.deepEqual([m.fromSession, m.sessionId, m.fresh, m.snapshotId, m.restored], [first, undefined, false, undefined, []]);
      assert.ok(m.error instanceof NoSnapshotError, String(m.error));
      assert.equal(m.error.reason, "no_snapshot");
      assert.match(m.error.message, /not_found/);
      assert.ok(m.error.cause instanceof AepError);
      // Ended for good: every later request rejects the same way, and no
      // further move is tried.
      await assert.rejects(working(c, mid, "plan"), (e: unknown) => e instanceof MoveFailedError);
      assert.ok(c.closedReason instanceof MoveFailedError);
      assert.equal(c.sessionId, first);
      assert.equal(c.moves.length, 1);
    });

    test("with moveFresh a session that left no snapshot moves to a fresh one", async (t) => {
      const { c, first, mid } = await drainWithoutSnapshot(t, kind, { moveFresh: true });
      // The restore finds nothing (not_found): the new session stays, fresh.
      assert.equal((await c.ping()).type, "pong");
      assert.equal(c.moves.length, 1);
      const m = c.moves[0]!;
      assert.deepEqual([m.fromSession, m.fresh, m.snapshotId, m.restored, m.error], [first, true, undefined, [], undefined]);
      assert.match(c.sessionId!, /^s-ts-b-/);
      await assert.rejects(working(c, mid, "plan"), (e: unknown) => e instanceof AepError);
    });

    test("a move that finds no host ends the client", async (t) => {
      const fleet = await fleetFor(t, sqliteStore());
      const a = await fleet.host("ts-a");
      // The drained host's connection drops without a close frame, so a
      // WebSocket first tries to re-attach, in vain: kept short here.
      const c = await open(kind, fleet.fwd!, { move: true, moveTimeoutSeconds: 2, reattachTimeoutSeconds: 1 });
      t.after(() => c.close());
      const first = c.sessionId!;
      const failed = new Promise<Move>((resolve) => c.onMove(resolve));
      await a.drain(); // and no other host: every new session is refused
      // The client moves by itself once it sees the session's end, and
      // gives up at the deadline.
      const m = await failed;
      assert.deepEqual([m.fromSession, m.sessionId], [first, undefined]);
      assert.ok(m.error);
      await assert.rejects(c.ping(), (e: unknown) => e instanceof MoveFailedError);
      assert.ok(c.closedReason instanceof MoveFailedError);
    });

    test("without move the loss is an error", async (t) => {
      const fleet = await fleetFor(t, sqliteStore());
      const a = await fleet.host("ts-a");
      const b = await fleet.host("ts-b");
      const c = await open(kind, fleet.fwd!);
      t.after(() => c.close());
      const first = c.sessionId;
      const call = await inFlight(c);
      await a.drain();
      fleet.fwd!.target = b.port;
      // The drain snapshots, so it seals the host and cancels what still
      // runs at its timeout (server/drain.go): the host's own `cancelled`,
      // which the client passes on as the reply.
      const err = await call.settled;
      assert.ok(err instanceof AepError && err.code === "cancelled", String(err));
      await assert.rejects(c.ping(), (e: unknown) => e instanceof ConnectionError && !(e instanceof RequestInterruptedError));
      assert.equal(c.sessionId, first);
      assert.deepEqual(c.moves, []);
    });
  });
}

// A WebSocket agent idle while its host died (SIGKILL) sends its next
// request before the proxy has noticed: the forwarder still holds the
// client's connection, loses what comes next and drops it, and the host is
// gone, so the re-attach fails (the forwarder now reaches host B, which
// does not have the session: 404) and the client moves to B, restoring
// the snapshot. With the idle check the request waits for a ping's answer;
// the ping is what gets lost, so the request is known never to have been
// written: it is sent in the new session and runs there once. With the
// check off the request itself goes into the dead connection; whether it
// ran is unknown, so it fails with RequestInterruptedError and is not sent
// again.
describe("idle WebSocket whose host died unnoticed", { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
  for (const { name, idleCheckSeconds, resent } of [
    { name: "the idle check finds it dead first: the request goes to the new session and runs once", idleCheckSeconds: 0.1, resent: true },
    { name: "with the check off the request is written into the dead connection: interrupted", idleCheckSeconds: 0, resent: false },
  ]) {
    test(name, async (t) => {
      const fleet = await fleetFor(t, sqliteStore());
      const a = await fleet.host("ts-a");
      const b = await fleet.host("ts-b");
      const c = await AepClient.websocket(fleet.fwd!.wsUrl, { move: true, snapshotWaitSeconds: 0.5, idleCheckSeconds });
      t.after(() => c.close());
      await c.connect({ agentId: "ts-move", token, caps });
      const first = c.sessionId!;
      const mid = (await c.memoryInit({})).memory_id;
      await store(c, mid, "plan", "saved");
      assert.equal((await c.sessionSnapshot({ target: "sql" })).covers_point, 2);
      await new Promise((r) => setTimeout(r, 300)); // idle past the check
      const moved = new Promise<Move>((resolve) => c.onMove(resolve));
      assert.equal(fleet.fwd!.loseUnnoticed(), 1);
      await a.stop();
      fleet.fwd!.target = b.port; // new connections reach B only

      const sent = await store(c, mid, "after", "sent once").then(
        () => undefined,
        (e: unknown) => e,
      );
      const m = await moved;
      assert.deepEqual([m.fromSession, m.error, m.snapshotId !== undefined, m.point], [first, undefined, true, 2]);
      assert.match(c.sessionId!, /^s-ts-b-/);
      assert.equal(c.moves.length, 1);
      if (!resent) {
        assert.ok(sent instanceof RequestInterruptedError, `the request written into the dead connection: ${String(sent)}`);
        assert.equal(sent.sessionId, first);
        // The snapshot's state, the interrupted request not sent again.
        assert.deepEqual(await working(c, mid, "plan", "after"), { plan: "saved" });
        assert.equal(c.point, 2);
        return;
      }
      assert.equal(sent, undefined, `the request sent after the host died, while the client was idle: ${String(sent)}`);
      assert.deepEqual(await working(c, mid, "plan", "after"), { plan: "saved", after: "sent once" });
      // Restored at point 2, and one state-changing request since: it ran once.
      assert.equal(c.point, 3);
    });
  }
});

describe("move on PostgreSQL", { skip: bin ? false : "no aep binary (set AEP_BIN or install Go)" }, () => {
  const pg = pgStore();
  test("over http", { skip: typeof pg === "string" ? pg : false }, (t) => movesOnDrain(t, "http", pg as Store));
});

test("stdio cannot move", { skip: bin ? false : "no aep binary" }, async () => {
  const tr = spawnStdio(bin!, ["serve", "--stdio", "--data-dir", dataDir()], { env: { ...process.env, AEP_AUTH_TOKEN: token } });
  try {
    assert.throws(() => new AepClient(tr, { move: true }), TypeError);
  } finally {
    await tr.close();
  }
});
