// The three transports of the SDK (docs/transports.md): WebSocket (GET
// /ws), HTTP+SSE (POST /send, GET /stream) and stdio (`aep serve --stdio`).
// Each carries one session's messages as lines of JSON both ways.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import WebSocket from "ws";
import { ConnectionError, SessionLostError } from "./errors.js";

/** Carries one session's lines between a client and a host. */
export interface Transport {
  /** The session's id when the transport knows it before the handshake (HTTP, WebSocket). */
  readonly sessionId: string | undefined;
  /** Starts delivering the host's lines; onClose runs once, when no line can come any more. */
  start(onLine: (line: string) => void, onClose: (err?: Error) => void): void;
  /** Sends one line (one JSON message, without its newline). */
  send(line: string): Promise<void>;
  /** Ends the transport; the host ends a stdio session, and keeps a network one for its grace period. */
  close(): Promise<void>;
  /**
   * Opens the same kind of transport to another session of the host that
   * waits for its handshake (a fork, a subagent's child), by its id; absent
   * on stdio, whose host serves one session.
   */
  attach?(sessionId: string): Promise<Transport>;
  /**
   * Opens a new session through the same URL and headers (through a proxy,
   * on whichever host it picks): what a client made with `{ move: true }`
   * moves to when this transport's session is lost. Absent on stdio.
   */
  newSession?(): Promise<Transport>;
}

export interface WebSocketOptions {
  /** Attach to an existing session (a subagent's child session); sent in a header, never in the URL. */
  sessionId?: string;
  /** More upgrade request headers (Origin, for example). */
  headers?: Record<string, string>;
  /** Abort the connection attempt. */
  signal?: AbortSignal;
}

/**
 * Opens aep's WebSocket transport at url (e.g. "ws://127.0.0.1:8765/ws"):
 * one session per connection, one message per text frame. A dropped
 * connection is not re-attached: its requests fail with ConnectionError
 * (docs/DECISIONS.md, TypeScript SDK), or a client made with
 * `{ move: true }` moves to a new session.
 */
export async function openWebSocket(url: string, opts: WebSocketOptions = {}): Promise<Transport> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.sessionId) headers["X-Session-Id"] = opts.sessionId;
  // No compression: frames are small JSON and the host does not offer it.
  const ws = new WebSocket(url, { headers, perMessageDeflate: false });
  let sessionId = opts.sessionId;
  ws.on("upgrade", (res) => {
    const id = res.headers["x-session-id"];
    if (typeof id === "string" && id) sessionId = id;
  });
  await new Promise<void>((resolve, reject) => {
    const onAbort = () => {
      ws.terminate();
      reject(new ConnectionError(`websocket ${url}: aborted`, { cause: opts.signal?.reason }));
    };
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    ws.once("open", () => {
      opts.signal?.removeEventListener("abort", onAbort);
      resolve();
    });
    ws.once("error", (err) => {
      opts.signal?.removeEventListener("abort", onAbort);
      reject(new ConnectionError(`websocket ${url}: ${err.message}`, { cause: err }));
    });
  });
  let closed: Promise<void> | undefined;
  return {
    get sessionId() {
      return sessionId;
    },
    attach: (id: string) => openWebSocket(url, { ...(opts.headers ? { headers: opts.headers } : {}), sessionId: id }),
    start(onLine, onClose) {
      ws.on("message", (data, isBinary) => {
        if (!isBinary) onLine(data.toString());
      });
      let err: Error | undefined;
      ws.on("error", (e) => {
        err = new SessionLostError(`websocket: ${e.message}`, { cause: e });
      });
      ws.on("close", (code, reason) => {
        onClose(err ?? new SessionLostError(`websocket closed (${code}${reason.length ? " " + reason.toString() : ""})`));
      });
    },
    send(line) {
      return new Promise((resolve, reject) => {
        if (ws.readyState !== WebSocket.OPEN) {
          // Refused before a byte is written.
          reject(new SessionLostError("websocket is not open", { delivered: false }));
          return;
        }
        ws.send(line, { binary: false }, (err) => (err ? reject(new SessionLostError(`websocket send: ${err.message}`, { cause: err })) : resolve()));
      });
    },
    close() {
      closed ??= new Promise<void>((resolve) => {
        if (ws.readyState === WebSocket.CLOSED) return resolve();
        ws.once("close", () => resolve());
        ws.close(1000);
      });
      return closed;
    },
    newSession() {
      const { sessionId: _attached, signal: _opening, ...rest } = opts;
      return openWebSocket(url, rest);
    },
  };
}

export interface HttpOptions {
  /** Attach to an existing session instead of creating one with POST /session. */
  sessionId?: string;
  /** More headers for every request. */
  headers?: Record<string, string>;
  /** Abort opening the session and its stream. */
  signal?: AbortSignal;
}

/**
 * Opens aep's HTTP transport at baseUrl (e.g. "http://127.0.0.1:8765"):
 * POST /session creates the session, each line goes out as POST /send, and
 * the host's lines are the events of GET /stream, read with fetch, since
 * EventSource cannot send X-Session-Id. A broken stream is reopened with
 * Last-Event-ID, so nothing is lost while the host's replay buffer holds it.
 */
export async function openHttp(baseUrl: string, opts: HttpOptions = {}): Promise<Transport> {
  const base = baseUrl.replace(/\/+$/, "");
  const extra = opts.headers ?? {};
  let sid = opts.sessionId;
  if (!sid) {
    const resp = await fetch(base + "/session", { method: "POST", headers: extra, ...(opts.signal ? { signal: opts.signal } : {}) }).catch((e: unknown) => {
      throw new ConnectionError(`create session: ${String(e)}`, { cause: e });
    });
    if (resp.status !== 200) throw new ConnectionError(`create session: HTTP ${resp.status}: ${(await resp.text()).trim()}`);
    const created = (await resp.json()) as { session_id?: string };
    if (!created.session_id) throw new ConnectionError("create session: no session_id in the response");
    sid = created.session_id;
  }
  const sessionId: string = sid;
  const stop = new AbortController();
  let lastEventId = "";

  const open = async (signal?: AbortSignal): Promise<ReadableStream<Uint8Array>> => {
    const headers: Record<string, string> = { ...extra, Accept: "text/event-stream", "X-Session-Id": sessionId };
    if (lastEventId) headers["Last-Event-ID"] = lastEventId;
    const resp = await fetch(base + "/stream", { headers, signal: signal ? AbortSignal.any([signal, stop.signal]) : stop.signal });
    if (resp.status !== 200 || !resp.body) {
      throw new ConnectionError(`open stream: HTTP ${resp.status}: ${(await resp.text()).trim()}`);
    }
    return resp.body;
  };
  let body = await open(opts.signal).catch((e: unknown) => {
    throw e instanceof ConnectionError ? e : new ConnectionError(`open stream: ${String(e)}`, { cause: e });
  });

  // readEvents parses the event-stream format (WHATWG) and hands over the
  // data of each event; it returns when the stream ends.
  const readEvents = async (stream: ReadableStream<Uint8Array>, onLine: (line: string) => void) => {
    const decoder = new TextDecoder();
    let buf = "";
    let data: string[] = [];
    let id = "";
    for await (const chunk of stream) {
      buf += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (id) lastEventId = id;
          if (data.length) onLine(data.join("\n"));
          data = [];
          id = "";
          continue;
        }
        if (line.startsWith(":")) continue; // a comment: heartbeat
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") data.push(value);
        else if (field === "id") id = value;
      }
    }
  };

  let done: Promise<void> | undefined;
  return {
    sessionId,
    attach: (id: string) => openHttp(baseUrl, { ...(opts.headers ? { headers: opts.headers } : {}), sessionId: id }),
    start(onLine, onClose) {
      done = (async () => {
        // Up to three reopenings in a row; an orderly end (the session is
        // over unless a reopening finds it) gets one.
        let tries = 0;
        for (;;) {
          let err: unknown;
          try {
            await readEvents(body, onLine);
            tries = Math.max(tries, 2);
          } catch (e) {
            err = e;
          }
          if (stop.signal.aborted) return onClose(new ConnectionError("stream closed"));
          let reopened = false;
          while (tries < 3 && !reopened) {
            tries++;
            await new Promise((r) => setTimeout(r, 50 << tries));
            try {
              body = await open();
              reopened = true;
            } catch (e) {
              err = e;
            }
          }
          if (!reopened) return onClose(new SessionLostError(`stream ended: ${err === undefined ? "the host closed it" : String(err)}`, { cause: err }));
          tries = 0;
        }
      })();
    },
    async send(line) {
      let resp: Response;
      try {
        resp = await fetch(base + "/send", {
          method: "POST",
          headers: { ...extra, "Content-Type": "text/plain", "X-Session-Id": sessionId },
          body: line,
        });
      } catch (e) {
        // Nothing listens where the session was: its host is gone.
        if ((e as { cause?: { code?: unknown } }).cause?.code === "ECONNREFUSED") throw new SessionLostError(`send: ${String(e)}`, { delivered: false, cause: e });
        throw new ConnectionError(`send: ${String(e)}`, { cause: e });
      }
      const text = await resp.text(); // read whole, so the connection is reused
      if (resp.status === 202) return;
      // 404: no such session here; 503: a host that takes no more. The
      // line was refused, not run. 502: a proxy lost the session's host,
      // perhaps after passing the line on.
      if (resp.status === 404 || resp.status === 503 || resp.status === 502) {
        throw new SessionLostError(`send: HTTP ${resp.status}: ${text.trim()}`, { delivered: resp.status === 502 });
      }
      throw new ConnectionError(`send: HTTP ${resp.status}: ${text.trim()}`);
    },
    async close() {
      stop.abort();
      await done;
    },
    newSession() {
      return openHttp(baseUrl, opts.headers ? { headers: opts.headers } : {});
    },
  };
}

export interface StdioSpawnOptions {
  /** Environment of the host process (AEP_AUTH_TOKEN, for one); default: this process's. */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Where the host's logs go: "inherit", "ignore" (the default) or "pipe". */
  stderr?: "inherit" | "ignore" | "pipe";
}

/**
 * Spawns a host serving one session as NDJSON on its stdin and stdout,
 * normally `aep serve --stdio`. Closing the transport closes the host's
 * stdin, which ends its session and the process.
 */
export function spawnStdio(command: string, args: string[], opts: StdioSpawnOptions = {}): Transport & { readonly process: ChildProcess } {
  const child = spawn(command, args, {
    stdio: ["pipe", "pipe", opts.stderr ?? "ignore"],
    env: opts.env ?? process.env,
    ...(opts.cwd ? { cwd: opts.cwd } : {}),
  });
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  let spawnErr: Error | undefined;
  child.once("error", (e) => {
    spawnErr = e;
  });
  return {
    process: child,
    sessionId: undefined,
    start(onLine, onClose) {
      const rl = createInterface({ input: child.stdout!, crlfDelay: Infinity });
      rl.on("line", (l) => {
        if (l) onLine(l);
      });
      void exited.then(() =>
        onClose(new ConnectionError(spawnErr ? `stdio: ${spawnErr.message}` : `stdio: host exited (${child.exitCode ?? child.signalCode})`, { cause: spawnErr })),
      );
    },
    send(line) {
      return new Promise((resolve, reject) => {
        if (spawnErr || !child.stdin!.writable) {
          reject(new ConnectionError(`stdio: ${spawnErr?.message ?? "host stdin closed"}`));
          return;
        }
        child.stdin!.write(line + "\n", (err) => (err ? reject(new ConnectionError(`stdio write: ${err.message}`, { cause: err })) : resolve()));
      });
    },
    async close() {
      child.stdin!.end();
      // The host ends when its stdin does; one that does not is killed.
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
