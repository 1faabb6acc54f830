// A small fleet for the move tests: `aep serve` hosts sharing one store (a
// SQLite file, or a PostgreSQL schema when one is at hand) that drain on
// SIGTERM with operator.snapshot_on_drain, and a loopback TCP forwarder
// standing in for the proxy: it sends each new connection to the host the
// test names, as a proxy sends a gone host's sessions to the pool.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import path from "node:path";
import { dataDir, freePort, token } from "./host.js";

/** A host that cuts requests still in flight a second after SIGTERM, so a test can hold one in flight across the drain. */
const drainTimeout = "1s";

export interface FleetHost {
  hostId: string;
  port: number;
  /** SIGTERM, then waits for the drain to end and the process to exit 0. */
  drain(): Promise<void>;
  /** Kills the host if it still runs. */
  stop(): Promise<void>;
}

export async function startFleetHost(bin: string, hostId: string, dsn: string, opts: { snapshotOnDrain?: boolean } = {}): Promise<FleetHost> {
  const dir = dataDir();
  const cfg = path.join(dir, "aep.yaml");
  writeFileSync(
    cfg,
    `server:\n  host_id: ${hostId}\noperator:\n  drain_timeout: ${drainTimeout}\n  snapshot_on_drain: ${opts.snapshotOnDrain ?? true}\n` +
      `store:\n  dsn: '${dsn.replaceAll("'", "''")}'\n`,
  );
  const port = await freePort();
  const child: ChildProcess = spawn(bin, ["serve", "--config", cfg, "--listen", `127.0.0.1:${port}`, "--data-dir", dir, "--log-level", "warn"], {
    env: { ...process.env, AEP_AUTH_TOKEN: token },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(base + "/readyz");
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null || i > 300) {
      child.kill("SIGKILL");
      throw new Error(`aep serve (${hostId}) did not become ready on ${base}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    hostId,
    port,
    async drain() {
      child.kill("SIGTERM");
      const code = await exited;
      if (code !== 0) throw new Error(`${hostId} exited ${code} after SIGTERM`);
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

/** One forwarded connection: the client's side and the host's. */
interface Pair {
  c: Socket;
  u: Socket;
  /** The host's side is gone and the forwarder has not noticed (Forwarder.loseUnnoticed). */
  unnoticed: boolean;
}

/**
 * A TCP forwarder on a free loopback port to 127.0.0.1:target; when either
 * side of a connection ends, both do. `sever` cuts every connection as a
 * network drop would; while `refuse` is set, new connections are cut at
 * once, as when the network is still down; `loseUnnoticed` is a proxy the
 * moment after its host died.
 */
export class Forwarder {
  target: number;
  refuse = false;
  readonly #server: Server;
  readonly #open = new Set<Pair>();
  port = 0;

  private constructor(target: number) {
    this.target = target;
    this.#server = createServer((c) => {
      if (this.refuse) {
        c.destroy();
        return;
      }
      const u = connect(this.target, "127.0.0.1");
      const pair: Pair = { c, u, unnoticed: false };
      this.#open.add(pair);
      const end = () => {
        c.destroy();
        u.destroy();
        this.#open.delete(pair);
      };
      const hostEnded = () => {
        if (!pair.unnoticed) end();
      };
      c.on("error", end).on("close", end);
      u.on("error", hostEnded).on("close", hostEnded);
      c.pipe(u);
      u.pipe(c);
    });
  }

  static async start(target: number): Promise<Forwarder> {
    const f = new Forwarder(target);
    await new Promise<void>((resolve) => f.#server.listen(0, "127.0.0.1", resolve));
    const a = f.#server.address();
    if (typeof a !== "object" || !a) throw new Error("forwarder: no port");
    f.port = a.port;
    return f;
  }

  get base(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get wsUrl(): string {
    return `ws://127.0.0.1:${this.port}/ws`;
  }

  /**
   * Cuts every open connection, both sides, and goes on accepting new
   * ones: neither end gets a close frame, as in a network drop. Returns
   * how many connections were cut.
   */
  sever(): number {
    const cut = [...this.#open];
    for (const p of cut) {
      p.c.destroy();
      p.u.destroy();
    }
    return cut.length;
  }

  /**
   * What a proxy's open connections are the moment after their host died,
   * before the proxy noticed: nothing more comes from the host, the
   * clients' connections stay open, and the next bytes a client sends are
   * lost as the proxy finds the host gone and drops that connection (no
   * close frame). With `keep`, the proxy never notices: it keeps the
   * connections open and loses everything that comes on them. Returns how
   * many connections it holds so.
   */
  loseUnnoticed(opts: { keep?: boolean } = {}): number {
    const held = [...this.#open];
    for (const p of held) {
      p.unnoticed = true;
      p.c.unpipe(p.u);
      p.u.unpipe(p.c);
      p.u.destroy();
      if (opts.keep) p.c.on("data", () => {}).resume();
      else p.c.once("data", () => p.c.destroy()).resume();
    }
    return held.length;
  }

  close(): Promise<void> {
    for (const p of this.#open) {
      p.c.destroy();
      p.u.destroy();
    }
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}

/** The store a fleet shares: a SQLite file, or a fresh schema of the local PostgreSQL. */
export interface Store {
  dsn: string;
  close(): void;
}

export function sqliteStore(): Store {
  return { dsn: path.join(dataDir(), "fleet.db"), close() {} };
}

/**
 * A schema of the local PostgreSQL as .ci/run sets it up
 * (AEP_TEST_PG_PASSWORD, the postgres user on 127.0.0.1:5432, made with
 * psql), or the reason there is none: the caller skips, unless CI is set.
 */
export function pgStore(): Store | string {
  const pw = process.env.AEP_TEST_PG_PASSWORD;
  let missing: string | undefined;
  if (!pw) missing = "AEP_TEST_PG_PASSWORD is unset";
  else {
    try {
      execFileSync("psql", ["--version"], { stdio: "ignore" });
    } catch {
      missing = "psql is not installed";
    }
  }
  if (missing) {
    if (process.env.CI) throw new Error(`no PostgreSQL for the test: ${missing}`);
    return `no PostgreSQL: ${missing} (CI unset)`;
  }
  const schema = "aep_ts_move_" + randomBytes(6).toString("hex");
  const psql = (sql: string) =>
    execFileSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c", sql], {
      env: { ...process.env, PGPASSWORD: pw, PGOPTIONS: "--client-min-messages=warning" },
      stdio: ["ignore", "ignore", "inherit"],
    });
  psql(`CREATE SCHEMA ${schema}`);
  return {
    dsn: `postgres://postgres:${encodeURIComponent(pw!)}@127.0.0.1:5432/postgres?sslmode=disable&search_path=${schema}`,
    close: () => psql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`),
  };
}
