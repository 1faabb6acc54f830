// Starts real aep hosts for the tests: the binary from $AEP_BIN (.ci/run
// sets it), else one built here with `go build`. Without either, the
// tests skip, except under CI, where they fail.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const token = "ts-sdk-test-token-0123456789";
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

let built: string | undefined;

/** The aep binary, or undefined (the caller skips) when none can be had outside CI. */
export function aepBinary(): string | undefined {
  if (process.env.AEP_BIN) return process.env.AEP_BIN;
  if (built) return built;
  const dir = mkdtempSync(path.join(tmpdir(), "aep-ts-bin-"));
  try {
    execFileSync("go", ["build", "-o", path.join(dir, "aep"), "./cmd/aep"], { cwd: repoRoot, stdio: "inherit" });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    if (process.env.CI) throw new Error(`no aep binary: AEP_BIN is unset and go build failed: ${String(e)}`);
    return undefined;
  }
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  built = path.join(dir, "aep");
  return built;
}

/** A fresh data directory, removed when the process exits. */
export function dataDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "aep-ts-data-"));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

/** A host serving HTTP (and /ws) on 127.0.0.1, ready when returned. */
export interface NetHost {
  base: string;
  stop(): Promise<void>;
}

/** extraArgs are more arguments of `aep serve` (a --config FILE). */
export async function startNetHost(bin: string, extraArgs: string[] = []): Promise<NetHost> {
  const port = await freePort();
  const child: ChildProcess = spawn(bin, ["serve", "--listen", `127.0.0.1:${port}`, "--data-dir", dataDir(), "--log-level", "warn", ...extraArgs], {
    env: { ...process.env, AEP_AUTH_TOKEN: token },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const base = `http://127.0.0.1:${port}`;
  // Ready when /healthz answers; the host may take a moment to start.
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(base + "/healthz");
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null || i > 300) {
      child.kill("SIGKILL");
      throw new Error(`aep serve did not become ready on ${base}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    base,
    async stop() {
      child.kill("SIGTERM");
      await exited;
    },
  };
}
