// The transports of the SDK (docs/transports.md): WebSocket (GET /ws),
// HTTP+SSE (POST /send, GET /stream), the single exchange (POST /send
// answered with the reply) and stdio (`aep serve --stdio`). Each carries
// one session's messages as lines of JSON both ways.
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";
import https from "node:https";
import { createInterface } from "node:readline";
import { setTimeout as delay } from "node:timers/promises";
import WebSocket from "ws";
import { ConnectionError, SessionLostError, SessionTerminatedError } from "./errors.js";

/** Carries one session's lines between a client and a host. */
export interface Transport {
  /** The session's id when the transport knows it before the handshake (HTTP, WebSocket). */
  readonly sessionId: string | undefined;
  /** Starts delivering the host's lines; onClose runs once, when no line can come any more. */
  start(onLine: (line: string) => void, onClose: (err?: Error) => void): void;
  /**
   * Sends one line (one JSON message, without its newline). `events` says
   * the request wants its events; only the single exchange, which carries
   * them in the request's own answer, reads it.
   */
  send(line: string, opts?: SendOptions): Promise<void>;
  /**
   * Hands line to the connection at once when it can (open, nothing to
   * wait for) and returns true; onError is then called if writing it
   * fails. False: use send. A request costs no promise of the transport's
   * this way (WebSocket has it).
   */
  sendNow?(line: string, onError: (err: ConnectionError) => void): boolean;
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

/** How a line is sent; see Transport.send. */
export interface SendOptions {
  events?: boolean;
}

/** ws's options of a text frame, made once. */
const textFrame = { binary: false };

export interface WebSocketOptions {
  /** Attach to an existing session (a subagent's child session); sent in a header, never in the URL. */
  sessionId?: string;
  /** More upgrade request headers (Origin, for example). */
  headers?: Record<string, string>;
  /** Abort the connection attempt. */
  signal?: AbortSignal;
  /**
   * How long a connection that drops (ends without a close frame from the
   * host) is tried again, to re-attach it to its session, before the
   * session counts as lost; default 10.
   */
  reattachTimeoutSeconds?: number;
  /**
   * A line written on a connection that has received no frame for this
   * long is preceded by a WebSocket ping, and goes out only once the pong
   * came back (at most 10 s; past that, or if the connection ends
   * meanwhile, the connection is taken for dropped and re-attached, and
   * the line, never written, goes on the new connection or, when the
   * session is lost, to the client's new session). A host that died while
   * the client was idle, behind a proxy that has not noticed yet, is so
   * found dead before a request is written into the void. Default 1; 0 or
   * less turns the check off.
   */
  idleCheckSeconds?: number;
}

/** aep's WebSocket transport: a Transport that re-attaches a dropped connection to its session. */
export interface WebSocketTransport extends Transport {
  /** How many times a connection that dropped was re-attached to its session. */
  readonly reattached: number;
  attach(sessionId: string): Promise<WebSocketTransport>;
  newSession(): Promise<WebSocketTransport>;
}

/**
 * Opens aep's WebSocket transport at url (e.g. "ws://127.0.0.1:8765/ws"):
 * one session per connection, one message per text frame. A connection
 * that drops without a close frame from the host is re-attached to its
 * session (X-Session-Id, and Last-Event-ID = the count of messages
 * received, so the host replays what was missed from its buffer; the host
 * keeps a dropped session for its grace period), tried for
 * `reattachTimeoutSeconds`. A line that could not be written meanwhile is
 * sent on the new connection. When the host no longer has the session
 * (404), at the timeout, or when the host closed the connection itself,
 * the session is lost: the transport ends with SessionLostError, and a
 * client made with `{ move: true }` moves to a new session.
 */
export async function openWebSocket(url: string, opts: WebSocketOptions = {}): Promise<WebSocketTransport> {
  const t = new WebSocketLine(url, opts);
  await t.open(opts.signal);
  return t;
}

/** A refused or failed upgrade; status is the host's HTTP status when it answered one. */
class UpgradeFailed extends ConnectionError {
  constructor(
    message: string,
    readonly status: number | undefined,
    cause: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
  }
}

/** The code ws gives a connection that ended without a close frame (none can carry it): a drop, after which the session may live on. */
const closedAbnormally = 1006;

/** The close code of a session the operator terminated (the admin API). */
const closedTerminated = 4410;

/** Whether an HTTP answer says the operator terminated the session: 404 with error "terminated" (openapi.yaml). */
function terminatedBody(status: number, text: string): boolean {
  if (status !== 404) return false;
  try {
    return (JSON.parse(text) as { error?: unknown }).error === "terminated";
  } catch {
    return false;
  }
}

/** How often a send waits for the connection to come back (its close, then a re-attach) before it gives up. */
const maxSendWaits = 8;

/** How long an idle check waits for its pong before the connection is taken for dead. */
const pingTimeoutMs = 10_000;

/** A ping on an idle connection and the lines waiting for its pong: each is told true once written, false if never written (the check failed), or an error if its write failed. */
interface IdleCheck {
  ws: WebSocket;
  waiting: { line: string; done: (r: boolean | ConnectionError) => void }[];
}

/** The WebSocket transport of one session, across the connections its re-attaches open. */
class WebSocketLine implements WebSocketTransport {
  readonly #url: string;
  readonly #opts: WebSocketOptions;
  readonly #reattachMs: number;
  /** The idle check's threshold in ms (idleCheckSeconds); 0: no check. */
  readonly #idleMs: number;
  /** When the connection in use last received a frame, opened, or answered a ping (performance.now()): the idle check's clock. */
  #heard = 0;
  /** The idle check under way on the connection in use, with the lines that wait for its pong, in the order they were sent. */
  #check: IdleCheck | undefined;
  #sessionId: string | undefined;
  /** The connection in use; after a drop, the dropped one until a re-attach replaces it. */
  #ws: WebSocket | undefined;
  /** Text frames received in this session, across connections: the re-attach's Last-Event-ID. */
  #received = 0;
  #reattached = 0;
  /** A re-attach under way; sends wait for it rather than write to a dead connection. */
  #gap: Promise<void> | undefined;
  /** The re-attach's connection attempt, which close aborts. */
  #dialing: WebSocket | undefined;
  /** Aborted by close: ends a re-attach's wait between tries. */
  readonly #stop = new AbortController();
  #closing = false;
  #closed: Promise<void> | undefined;
  /** Why no line can come any more. */
  #ended: Error | undefined;
  #onLine: ((line: string) => void) | undefined;
  #onClose: ((err?: Error) => void) | undefined;
  /** onClose has run. */
  #told = false;
  /** Lines that came before start. */
  readonly #early: string[] = [];

  constructor(url: string, opts: WebSocketOptions) {
    this.#url = url;
    this.#opts = opts;
    this.#sessionId = opts.sessionId;
    this.#reattachMs = (opts.reattachTimeoutSeconds ?? 10) * 1000;
    const idle = opts.idleCheckSeconds ?? 1;
    this.#idleMs = idle > 0 ? idle * 1000 : 0;
  }

  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  get reattached(): number {
    return this.#reattached;
  }

  open(signal: AbortSignal | undefined): Promise<void> {
    return this.#dial(undefined, signal, undefined);
  }

  /**
   * One connection attempt; with lastSeen, a re-attach. The connection
   * becomes the one in use as it opens, in its open event, before any of
   * its frames can be read: the replay may come in the same packet as the
   * upgrade's answer.
   */
  #dial(lastSeen: number | undefined, signal: AbortSignal | undefined, timeoutMs: number | undefined): Promise<void> {
    const headers: Record<string, string> = { ...this.#opts.headers };
    if (this.#sessionId) headers["X-Session-Id"] = this.#sessionId;
    if (lastSeen !== undefined) headers["Last-Event-ID"] = String(lastSeen);
    // No compression: frames are small JSON and the host does not offer it.
    const ws = new WebSocket(this.#url, { headers, perMessageDeflate: false, ...(timeoutMs !== undefined ? { handshakeTimeout: timeoutMs } : {}) });
    if (lastSeen !== undefined) this.#dialing = ws;
    let status: number | undefined;
    let failure: Error | undefined;
    ws.on("upgrade", (res) => {
      const id = res.headers["x-session-id"];
      if (typeof id === "string" && id) this.#sessionId = id;
    });
    ws.on("unexpected-response", (_req, res) => {
      // Kept for the caller (404: no such session), and not in the
      // message: the body names the session, whose id is a bearer secret.
      status = res.statusCode;
      res.resume();
      ws.terminate();
    });
    ws.on("message", (data, isBinary) => {
      if (ws !== this.#ws) return;
      this.#heard = performance.now();
      if (isBinary) return;
      this.#received++;
      const line = data.toString();
      if (this.#onLine) this.#onLine(line);
      else this.#early.push(line);
    });
    // A ping of the host's (its keep-alive) or the pong of an idle check:
    // the host was there.
    const heard = () => {
      if (ws === this.#ws) this.#heard = performance.now();
    };
    ws.on("ping", heard);
    ws.on("pong", heard);
    ws.on("error", (e) => {
      failure ??= e;
    });
    ws.on("close", (code, reason) => {
      if (ws === this.#ws) this.#closedConn(code, reason, failure);
    });
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => ws.terminate();
      signal?.addEventListener("abort", onAbort, { once: true });
      let settled = false;
      ws.once("open", () => {
        settled = true;
        signal?.removeEventListener("abort", onAbort);
        if (this.#dialing === ws) this.#dialing = undefined;
        if (this.#closing) {
          ws.terminate();
          reject(new ConnectionError("websocket closed"));
          return;
        }
        this.#ws = ws;
        this.#heard = performance.now();
        resolve();
      });
      ws.once("close", () => {
        if (settled) return;
        signal?.removeEventListener("abort", onAbort);
        if (this.#dialing === ws) this.#dialing = undefined;
        if (signal?.aborted) reject(new ConnectionError(`websocket ${this.#url}: aborted`, { cause: signal.reason }));
        else reject(new UpgradeFailed(`websocket ${this.#url}: ${status !== undefined ? `HTTP ${status}` : (failure?.message ?? "closed")}`, status, failure));
      });
    });
  }

  /** The connection in use ended: a drop is re-attached; a close the host sent, or ours, ends the transport. */
  #closedConn(code: number, reason: Buffer, err: Error | undefined) {
    if (code === closedTerminated && !this.#closing) {
      this.#end(new SessionTerminatedError(`websocket closed: the operator terminated the session (${code})`));
      return;
    }
    if (this.#closing || code !== closedAbnormally || !this.#sessionId) {
      this.#end(err ? new SessionLostError(`websocket: ${err.message}`, { cause: err }) : new SessionLostError(`websocket closed (${code}${reason.length ? " " + reason.toString() : ""})`));
      return;
    }
    const gap: Promise<void> = this.#reattach(err ?? new ConnectionError(`websocket dropped (${code})`)).finally(() => {
      if (this.#gap === gap) this.#gap = undefined; // not a later drop's
    });
    this.#gap = gap;
  }

  /** Tries to re-attach until the host says it has no such session, or the timeout; then the transport ends. Never rejects. */
  async #reattach(cause: Error): Promise<void> {
    const deadline = Date.now() + this.#reattachMs;
    let wait = 50;
    let last: unknown = cause;
    while (!this.#closing) {
      try {
        await this.#dial(this.#received, undefined, Math.max(deadline - Date.now(), 100));
        this.#reattached++;
        return;
      } catch (e) {
        if (e instanceof UpgradeFailed && (e.status === 404 || e.status === 410)) {
          this.#end(new SessionLostError(`websocket dropped and the host no longer has the session (HTTP ${e.status})`, { cause: e }));
          return;
        }
        last = e;
      }
      // The last try comes at the deadline.
      const left = deadline - Date.now();
      if (left <= 0) break;
      await delay(Math.min(wait, left), undefined, { signal: this.#stop.signal }).catch(() => {});
      wait = Math.min(2 * wait, 1000);
    }
    const why = last instanceof Error ? last.message : String(last);
    this.#end(this.#closing ? new ConnectionError("websocket closed") : new SessionLostError(`websocket dropped and could not be re-attached in ${this.#reattachMs / 1000}s: ${why}`, { cause: last }));
  }

  #end(err: Error) {
    if (this.#ended) return;
    this.#ended = err;
    // Told after the sends that waited for a re-attach have rejected
    // (promises, all settled before the next turn of the event loop): a
    // client then knows which of its lines never left before it hears
    // that the session is lost, and can send those to a new session.
    setImmediate(() => this.#tell());
  }

  #tell() {
    if (!this.#ended || !this.#onClose || this.#told) return;
    this.#told = true;
    this.#onClose(this.#ended);
  }

  start(onLine: (line: string) => void, onClose: (err?: Error) => void): void {
    this.#onLine = onLine;
    this.#onClose = onClose;
    for (const line of this.#early.splice(0)) onLine(line);
    this.#tell();
  }

  /** Whether the connection in use has been quiet past the idle check: a line must wait for a ping's answer. */
  #idle(): boolean {
    return this.#idleMs > 0 && performance.now() - this.#heard >= this.#idleMs;
  }

  /**
   * Writes line on ws, the connection in use, once an idle check's pong
   * proves the host is there: the check under way, or a new one (a ping).
   * Resolves true once written (rejects if the write fails: perhaps
   * written); false, with nothing written, when ws ends first, or after
   * pingTimeoutMs, when ws is cut (its close event then re-attaches it, as
   * for any drop). The lines waiting for a pong are written in order in
   * its event, before any other line can be.
   */
  #afterCheck(ws: WebSocket, line: string): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      const done = (r: boolean | ConnectionError) => (r instanceof ConnectionError ? reject(r) : resolve(r));
      if (this.#check?.ws === ws) {
        this.#check.waiting.push({ line, done });
        return;
      }
      const check: IdleCheck = { ws, waiting: [{ line, done }] };
      this.#check = check;
      const finish = (alive: boolean) => {
        clearTimeout(timer);
        ws.off("pong", onPong);
        ws.off("close", onClose);
        if (this.#check === check) this.#check = undefined;
        // A pong that comes as the connection or the transport closes
        // writes nothing: the lines go where the close says.
        if (ws.readyState !== WebSocket.OPEN || this.#closing || this.#ended) alive = false;
        for (const w of check.waiting) {
          if (!alive) w.done(false);
          else ws.send(w.line, textFrame, (err) => w.done(err ? new ConnectionError(`websocket send: ${err.message}`, { cause: err }) : true));
        }
      };
      const onPong = () => finish(true);
      const onClose = () => finish(false);
      const timer = setTimeout(() => {
        ws.terminate();
        finish(false);
      }, pingTimeoutMs);
      ws.on("pong", onPong);
      ws.on("close", onClose);
      // A failed write of the ping ends the connection: its close settles this.
      ws.ping(undefined, undefined, () => {});
    });
  }

  sendNow(line: string, onError: (err: ConnectionError) => void): boolean {
    const ws = this.#ws;
    // An idle connection, or one being checked, is for send: it pings first.
    if (!ws || this.#ended || this.#closing || this.#gap || this.#check || ws.readyState !== WebSocket.OPEN || this.#idle()) return false;
    // Handed to the open connection: a failure to write it goes to onError
    // (perhaps written, so not sent again).
    ws.send(line, textFrame, (err) => {
      if (err) onError(new ConnectionError(`websocket send: ${err.message}`, { cause: err }));
    });
    return true;
  }

  async send(line: string): Promise<void> {
    for (let waits = 0; waits < maxSendWaits; waits++) {
      // Refused before a byte is written: the line did not reach the session.
      if (this.#ended || this.#closing) throw new SessionLostError(`websocket is not open${this.#ended ? ": " + this.#ended.message : ""}`, { delivered: false, ...(this.#ended ? { cause: this.#ended } : {}) });
      if (this.#gap) {
        await this.#gap; // the line goes on the new connection
        continue;
      }
      const ws = this.#ws!;
      if (ws.readyState !== WebSocket.OPEN) {
        // Closing: its close event says whether it is re-attached (then a
        // re-attach is under way) or the transport ends.
        if (ws.readyState !== WebSocket.CLOSED) await new Promise((r) => ws.once("close", r));
        continue;
      }
      if (this.#check || this.#idle()) {
        // Quiet for a while (or being checked for an earlier line, which
        // goes first): the host may be gone with the connection still
        // open. The line is written once a pong proves it is not; if none
        // comes, the connection's end says where it goes instead.
        if (await this.#afterCheck(ws, line)) return;
        continue;
      }
      return new Promise<void>((resolve, reject) => {
        // Failed after it was handed to the connection: perhaps written,
        // so not sent again; whether the session lives on is for the
        // connection's end to tell, not this send.
        ws.send(line, textFrame, (err) => (err ? reject(new ConnectionError(`websocket send: ${err.message}`, { cause: err })) : resolve()));
      });
    }
    throw new SessionLostError("websocket kept dropping as it was re-attached", { delivered: false });
  }

  close(): Promise<void> {
    this.#closed ??= (async () => {
      this.#closing = true;
      this.#stop.abort();
      this.#dialing?.terminate();
      await this.#gap;
      const ws = this.#ws;
      if (!ws || ws.readyState === WebSocket.CLOSED) return;
      await new Promise<void>((resolve) => {
        ws.once("close", () => resolve());
        ws.close(1000);
      });
    })();
    return this.#closed;
  }

  attach(sessionId: string): Promise<WebSocketTransport> {
    const { headers, reattachTimeoutSeconds, idleCheckSeconds } = this.#opts;
    return openWebSocket(this.#url, {
      ...(headers ? { headers } : {}),
      ...(reattachTimeoutSeconds !== undefined ? { reattachTimeoutSeconds } : {}),
      ...(idleCheckSeconds !== undefined ? { idleCheckSeconds } : {}),
      sessionId,
    });
  }

  newSession(): Promise<WebSocketTransport> {
    const { sessionId: _attached, signal: _opening, ...rest } = this.#opts;
    return openWebSocket(this.#url, rest);
  }
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
      const text = (await resp.text()).trim();
      if (terminatedBody(resp.status, text)) throw new SessionTerminatedError("open stream: the operator terminated the session");
      throw new ConnectionError(`open stream: HTTP ${resp.status}: ${text}`);
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
          if (err instanceof SessionTerminatedError) return onClose(err);
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
      if (terminatedBody(resp.status, text)) throw new SessionTerminatedError("send: the operator terminated the session");
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

export interface ExchangeOptions {
  /** Attach to an existing session instead of creating one with POST /session. */
  sessionId?: string;
  /** More headers for every request. */
  headers?: Record<string, string>;
  /** Abort creating the session. */
  signal?: AbortSignal;
}

/**
 * Opens aep's single exchange at baseUrl (e.g. "http://127.0.0.1:8765"):
 * POST /session creates the session, and each line is one POST /send whose
 * answer carries the reply (Accept: application/json) or, when the request
 * wants events, its events and then its reply (Accept: text/event-stream).
 * Nothing stays open between requests: for clients that cannot keep a
 * socket or a stream open (serverless functions, proxies that buffer).
 * Events of requests that did not ask for them are not sent (a tool's
 * events are still in its result). Requests go over node:http with a
 * keep-alive agent of the transport's own. A POST the host refuses with
 * 404, 502 or 503, or that cannot connect, rejects with SessionLostError.
 */
export async function openExchange(baseUrl: string, opts: ExchangeOptions = {}): Promise<Transport> {
  const base = new URL(baseUrl.replace(/\/+$/, ""));
  const tls = base.protocol === "https:";
  if (!tls && base.protocol !== "http:") throw new TypeError(`openExchange: ${baseUrl} is not an http(s) URL`);
  const prefix = base.pathname.replace(/\/+$/, "");
  const extra = opts.headers ?? {};
  const agent = tls ? new https.Agent({ keepAlive: true }) : new http.Agent({ keepAlive: true });
  const requester = tls ? https.request : http.request;
  let onLine: ((line: string) => void) | undefined;
  let onClose: ((err?: Error) => void) | undefined;
  let closed = false;
  const early: string[] = [];

  /** One POST; resolves with the status, the content type and the body (or, with onData, hands the body over as it comes). */
  const post = (path: string, body: string, headers: Record<string, string>, signal?: AbortSignal, onData?: (chunk: Buffer) => void) =>
    new Promise<{ status: number; type: string; body: string }>((resolve, reject) => {
      const req = requester(
        {
          protocol: base.protocol,
          hostname: base.hostname,
          port: base.port,
          path: prefix + path,
          method: "POST",
          agent,
          headers: { ...extra, ...headers, "Content-Length": Buffer.byteLength(body) },
          ...(signal ? { signal } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => (onData && res.statusCode === 200 ? onData(c) : chunks.push(c)));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, type: String(res.headers["content-type"] ?? ""), body: Buffer.concat(chunks).toString() }));
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(body);
    });

  let sid = opts.sessionId;
  if (!sid) {
    const r = await post("/session", "", {}, opts.signal).catch((e: unknown) => {
      throw new ConnectionError(`create session: ${String(e)}`, { cause: e });
    });
    if (r.status !== 200) throw new ConnectionError(`create session: HTTP ${r.status}: ${r.body.trim()}`);
    const created = JSON.parse(r.body) as { session_id?: string };
    if (!created.session_id) throw new ConnectionError("create session: no session_id in the response");
    sid = created.session_id;
  }
  const sessionId: string = sid;
  const deliver = (line: string) => (onLine ? onLine(line) : early.push(line));

  return {
    sessionId,
    start(lineFn, closeFn) {
      onLine = lineFn;
      onClose = closeFn;
      for (const l of early.splice(0)) lineFn(l);
      if (closed) closeFn(new ConnectionError("exchange closed"));
    },
    async send(line, sendOpts) {
      if (closed) throw new SessionLostError("exchange is closed", { delivered: false });
      const events = sendOpts?.events ?? false;
      let sse = "";
      let data: string[] = [];
      let got = 0;
      // The event stream's events go to the client as they come, before the reply.
      const onData = events
        ? (chunk: Buffer) => {
            sse += chunk.toString();
            let nl: number;
            while ((nl = sse.indexOf("\n")) >= 0) {
              const l = sse.slice(0, nl).replace(/\r$/, "");
              sse = sse.slice(nl + 1);
              if (l === "") {
                if (data.length) {
                  got++;
                  deliver(data.join("\n"));
                }
                data = [];
              } else if (l.startsWith("data:")) data.push(l.slice(l.startsWith("data: ") ? 6 : 5));
            }
          }
        : undefined;
      let r: { status: number; type: string; body: string };
      try {
        r = await post("/send", line, { "Content-Type": "text/plain", "X-Session-Id": sessionId, Accept: events ? "text/event-stream" : "application/json" }, undefined, onData);
      } catch (e) {
        // Nothing listens where the session was: its host is gone.
        if ((e as { code?: unknown }).code === "ECONNREFUSED") throw new SessionLostError(`send: ${String(e)}`, { delivered: false, cause: e });
        throw new ConnectionError(`send: ${String(e)}`, { cause: e });
      }
      if (r.status === 202) return; // a notification
      if (terminatedBody(r.status, r.body)) throw new SessionTerminatedError("send: the operator terminated the session");
      // 404: no such session here; 503: a host that takes no more. The
      // line was refused, not run. 502: a proxy lost the session's host,
      // perhaps after passing the line on.
      if (r.status === 404 || r.status === 503 || r.status === 502) {
        throw new SessionLostError(`send: HTTP ${r.status}: ${r.body.trim()}`, { delivered: r.status === 502 });
      }
      if (r.status !== 200) throw new ConnectionError(`send: HTTP ${r.status}: ${r.body.trim()}`);
      const reply = r.body.trim();
      if (reply && !r.type.startsWith("text/event-stream")) {
        deliver(reply);
        return;
      }
      // The host gave up on the request (it is closing, and cancelled what
      // was running) without a reply.
      if (!got) throw new ConnectionError("send: the host answered without a reply");
    },
    async close() {
      if (closed) return;
      closed = true;
      agent.destroy();
      onClose?.(new ConnectionError("exchange closed"));
    },
    attach: (id: string) => openExchange(baseUrl, { ...(opts.headers ? { headers: opts.headers } : {}), sessionId: id }),
    newSession: () => openExchange(baseUrl, opts.headers ? { headers: opts.headers } : {}),
  };
}

export interface StdioSpawnOptions {
  /**
   * Environment of the host process; default: this process's. The
   * handshake's token becomes the host's AEP_AUTH_TOKEN unless this sets one.
   */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /**
   * Where the host's logs go: "ignore" (the default: discarded), "inherit"
   * (this process's stderr), "pipe" (`process.stderr` of the child), a file
   * descriptor (fs.openSync), or any writable stream.
   */
  stderr?: "inherit" | "ignore" | "pipe" | number | NodeJS.WritableStream;
}

/** The variable `aep serve` reads its token from when its configuration names none. */
const authTokenEnv = "AEP_AUTH_TOKEN";

/** The auth_token of a handshake line, or undefined for any other line. */
function handshakeToken(line: string): string | undefined {
  try {
    const m = JSON.parse(line) as { type?: unknown; auth_token?: unknown };
    return m.type === "handshake/req" && typeof m.auth_token === "string" && m.auth_token !== "" ? m.auth_token : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Spawns a host serving one session as NDJSON on its stdin and stdout,
 * normally `aep serve --stdio`. The process starts when the first line is
 * sent: when that line is the handshake, its token is put in the host's
 * environment as AEP_AUTH_TOKEN (replacing the one this process's
 * environment may hold, not one `opts.env` sets), so a host whose
 * configuration names no token accepts the token given in code. The token
 * is never an argument, which `ps` would show. Closing the transport closes
 * the host's stdin, which ends its session and the process.
 */
export function spawnStdio(command: string, args: string[], opts: StdioSpawnOptions = {}): Transport & { readonly process: ChildProcess | undefined } {
  let child: ChildProcess | undefined;
  let exited: Promise<void> | undefined;
  let spawnErr: Error | undefined;
  let onLine: ((line: string) => void) | undefined;
  let onClose: ((err?: Error) => void) | undefined;
  let closed = false;
  let closing: Promise<void> | undefined;
  const errStream = typeof opts.stderr === "object" ? opts.stderr : undefined;
  const errIO: "inherit" | "ignore" | "pipe" | number = typeof opts.stderr === "object" ? "pipe" : (opts.stderr ?? "ignore");
  const spawnHost = (first: string): ChildProcess => {
    const env = { ...(opts.env ?? process.env) };
    const tok = handshakeToken(first);
    if (tok !== undefined && !(opts.env && authTokenEnv in opts.env)) env[authTokenEnv] = tok;
    const c: ChildProcess = spawn(command, args, {
      stdio: ["pipe", "pipe", errIO],
      env,
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
    });
    if (errStream) c.stderr!.pipe(errStream, { end: false });
    exited = new Promise<void>((resolve) => c.once("close", () => resolve()));
    c.once("error", (e: Error) => {
      spawnErr = e;
    });
    const rl = createInterface({ input: c.stdout!, crlfDelay: Infinity });
    rl.on("line", (l) => {
      if (l) onLine?.(l);
    });
    void exited.then(() =>
      onClose?.(new ConnectionError(spawnErr ? `stdio: ${spawnErr.message}` : `stdio: host exited (${c.exitCode ?? c.signalCode})`, { cause: spawnErr })),
    );
    return c;
  };
  return {
    get process() {
      return child;
    },
    sessionId: undefined,
    start(lineFn, closeFn) {
      onLine = lineFn;
      onClose = closeFn;
    },
    send(line) {
      return new Promise((resolve, reject) => {
        if (closed) {
          reject(new ConnectionError("stdio: transport closed"));
          return;
        }
        child ??= spawnHost(line);
        if (spawnErr || !child.stdin!.writable) {
          reject(new ConnectionError(`stdio: ${spawnErr?.message ?? "host stdin closed"}`));
          return;
        }
        child.stdin!.write(line + "\n", (err) => (err ? reject(new ConnectionError(`stdio write: ${err.message}`, { cause: err })) : resolve()));
      });
    },
    close() {
      closing ??= (async () => {
        closed = true;
        if (!child) {
          // Never started: nothing to end.
          onClose?.(new ConnectionError("stdio: transport closed"));
          return;
        }
        child.stdin!.end();
        // The host ends when its stdin does; one that does not is killed.
        const c = child;
        const timer = setTimeout(() => c.kill("SIGKILL"), 10_000);
        await exited;
        clearTimeout(timer);
      })();
      return closing;
    },
  };
}
