import { randomBytes } from "node:crypto";
import { AepError, ConnectionError } from "./errors.js";
import {
  Methods,
  requestTable,
  type Body,
  type EventMessage,
  type HandshakeRespMessage,
  type HostMessage,
  type NotificationType,
  type NotificationTypes,
  type RequestType,
  type RequestTypes,
} from "./messages.gen.js";
import { forkSession, type ForkHandshake, type ForkOptions, type Forks } from "./fork.js";
import { openHttp, openWebSocket, spawnStdio, type HttpOptions, type StdioSpawnOptions, type Transport, type WebSocketOptions } from "./transports.js";

/** Options of one request. */
export interface RequestOptions {
  /**
   * Cancels the request: the client sends `cancel` for it, and the request
   * settles with the host's answer, normally an AepError with code
   * `cancelled` (the host answers every request exactly once).
   */
  signal?: AbortSignal;
  /** Receives the request's events (spec §6), in order, before the reply. */
  onEvent?: (event: EventMessage) => void;
}

/** A request in flight with its events as an async iterator; see AepClient.stream. */
export interface RequestStream<T extends RequestType> {
  /** The request's events; the iteration ends when the reply arrives. */
  events: AsyncIterable<RequestTypes[T]["event"]>;
  /** The reply; an `error` reply rejects with AepError. */
  reply: Promise<RequestTypes[T]["reply"]>;
}

interface Pending {
  type: RequestType;
  resolve: (m: HostMessage) => void;
  reject: (e: unknown) => void;
  onEvent: ((e: EventMessage) => void) | undefined;
}

/**
 * A connection to one session of an aep host. Every request type has a
 * typed method (generated from the contract, tools/tsgen), e.g.
 * `toolCall({ tool_name, arguments })`; start with `handshake` or
 * `connect`. Requests may run concurrently; each settles with its reply.
 */
export class AepClient extends Methods<RequestOptions> {
  readonly #t: Transport;
  readonly #pending = new Map<string, Pending>();
  readonly #prefix = randomBytes(4).toString("hex");
  readonly #eventListeners = new Set<(e: EventMessage) => void>();
  readonly #strayListeners = new Set<(m: HostMessage) => void>();
  readonly #closeListeners = new Set<(e: Error) => void>();
  #seq = 0;
  #sessionId: string | undefined;
  #ended: Error | undefined;
  #hello: ForkHandshake | undefined; // the handshake connect made, which forks repeat

  /** Starts a client on a transport; use the static openers for the usual ones. */
  constructor(transport: Transport) {
    super();
    this.#t = transport;
    this.#sessionId = transport.sessionId;
    transport.start(
      (line) => this.#line(line),
      (err) => this.#end(err ?? new ConnectionError("connection closed")),
    );
  }

  /** Connects over WebSocket, e.g. "ws://127.0.0.1:8765/ws". */
  static async websocket(url: string, opts?: WebSocketOptions): Promise<AepClient> {
    return new AepClient(await openWebSocket(url, opts));
  }

  /** Connects over HTTP+SSE, e.g. "http://127.0.0.1:8765". */
  static async http(baseUrl: string, opts?: HttpOptions): Promise<AepClient> {
    return new AepClient(await openHttp(baseUrl, opts));
  }

  /** Spawns a host over stdio, e.g. `AepClient.stdio("aep", ["serve", "--stdio"])`. */
  static stdio(command: string, args: string[], opts?: StdioSpawnOptions): AepClient {
    return new AepClient(spawnStdio(command, args, opts));
  }

  /** The session's id, known after the handshake (or from the transport). */
  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  /** Why the connection ended; undefined while it is open. */
  get closedReason(): Error | undefined {
    return this.#ended;
  }

  /**
   * Handshakes (spec §2.4) with the agent's id, the host's token and the
   * capabilities wanted. A refused handshake rejects with AepError.
   */
  async connect(opts: { agentId: string; token: string; caps?: string[] }, options?: RequestOptions): Promise<HandshakeRespMessage> {
    const hs = await this.handshake({ agent_id: opts.agentId, auth_token: opts.token, agent_caps: opts.caps ?? [] }, options);
    this.#hello = { ...opts };
    return hs;
  }

  /**
   * Forks this session count ways (session/fork/req) and returns a
   * connected, handshaken client of each fork; see forkSession (fork.ts).
   */
  fork(count: number, opts?: ForkOptions): Promise<Forks> {
    return forkSession(this, this.#t, (t) => new AepClient(t), this.#hello, count, opts);
  }

  override request<T extends RequestType>(type: T, body: Body<RequestTypes[T]["request"]>, options: RequestOptions = {}): Promise<RequestTypes[T]["reply"]> {
    if (this.#ended) return Promise.reject(this.#ended);
    const { signal, onEvent } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const id = this.#nextId();
    return new Promise<RequestTypes[T]["reply"]>((resolve, reject) => {
      let onAbort: (() => void) | undefined;
      const settle = () => {
        this.#pending.delete(id);
        if (onAbort) signal?.removeEventListener("abort", onAbort);
      };
      this.#pending.set(id, {
        type,
        resolve: (m) => {
          settle();
          resolve(m as RequestTypes[T]["reply"]);
        },
        reject: (e) => {
          settle();
          reject(e);
        },
        onEvent,
      });
      if (signal) {
        onAbort = () => {
          // The host answers the request `cancelled` (or its reply, if it
          // was already on its way); that answer settles the promise.
          this.notify("cancel", { req_id: id }).catch((e: unknown) => this.#pending.get(id)?.reject(e));
        };
        signal.addEventListener("abort", onAbort, { once: true });
      }
      this.#t.send(JSON.stringify({ ...body, type, id, proto: "1.0", ts: Date.now() / 1000 })).catch((e: unknown) => this.#pending.get(id)?.reject(e));
    });
  }

  /**
   * Sends a request and returns its events as an async iterator beside
   * its reply: `for await (const e of s.events) …; const r = await s.reply`.
   */
  stream<T extends RequestType>(type: T, body: Body<RequestTypes[T]["request"]>, options: Omit<RequestOptions, "onEvent"> = {}): RequestStream<T> {
    const q = new Queue<RequestTypes[T]["event"]>();
    const reply = this.request(type, body, { ...options, onEvent: (e) => q.push(e as RequestTypes[T]["event"]) });
    reply.then(
      () => q.end(),
      () => q.end(),
    );
    return { events: q, reply };
  }

  /** Sends a message that gets no reply: `cancel` or `shutdown`. */
  notify<T extends NotificationType>(type: T, body: Body<NotificationTypes[T]>): Promise<void> {
    if (this.#ended) return Promise.reject(this.#ended);
    return this.#t.send(JSON.stringify({ ...body, type, id: this.#nextId(), proto: "1.0", ts: Date.now() / 1000 }));
  }

  /**
   * Sends one line as it is. For tests of a host's answer to a broken line:
   * its `error` arrives at onStray, as it names no request of this client.
   */
  sendLine(line: string): Promise<void> {
    if (this.#ended) return Promise.reject(this.#ended);
    return this.#t.send(line);
  }

  /** Asks the host to drain and end this session (its requests get their replies first). */
  shutdown(timeoutSeconds?: number): Promise<void> {
    return this.notify("shutdown", timeoutSeconds === undefined ? {} : { timeout: timeoutSeconds });
  }

  /** Calls fn with every event of the session; returns a function that stops it. */
  onEvent(fn: (e: EventMessage) => void): () => void {
    this.#eventListeners.add(fn);
    return () => this.#eventListeners.delete(fn);
  }

  /**
   * Calls fn with every host message no pending request awaits, such as
   * the `error` a line without a readable id gets; returns a function that
   * stops it.
   */
  onStray(fn: (m: HostMessage) => void): () => void {
    this.#strayListeners.add(fn);
    return () => this.#strayListeners.delete(fn);
  }

  /** Calls fn once when the connection ends. */
  onClose(fn: (e: Error) => void): () => void {
    if (this.#ended) {
      fn(this.#ended);
      return () => {};
    }
    this.#closeListeners.add(fn);
    return () => this.#closeListeners.delete(fn);
  }

  /** Every event of the session as an async iterator, until the connection ends or signal aborts. */
  events(signal?: AbortSignal): AsyncIterable<EventMessage> {
    const q = new Queue<EventMessage>();
    const stopEvents = this.onEvent((e) => q.push(e));
    const stop = () => {
      stopEvents();
      stopClose();
      q.end();
    };
    const stopClose = this.onClose(stop);
    signal?.addEventListener("abort", stop, { once: true });
    return q;
  }

  /** Ends the transport; requests still in flight reject with ConnectionError. */
  async close(): Promise<void> {
    await this.#t.close();
    this.#end(new ConnectionError("client closed"));
  }

  #nextId(): string {
    return `${this.#prefix}-${(this.#seq++).toString(36)}`;
  }

  #line(line: string) {
    let m: HostMessage;
    try {
      m = JSON.parse(line) as HostMessage;
    } catch {
      // A host sends only JSON (spec §2.1); a line that is not ends the
      // connection rather than leave its request waiting forever.
      this.#end(new ConnectionError(`host sent a line that is not JSON: ${line.slice(0, 200)}`));
      void this.#t.close();
      return;
    }
    const p = this.#pending.get(m.req_id);
    if (m.type.endsWith("/event")) {
      const e = m as EventMessage;
      p?.onEvent?.(e);
      for (const fn of this.#eventListeners) fn(e);
      return;
    }
    if (!p) {
      for (const fn of this.#strayListeners) fn(m);
      return;
    }
    if (m.type === "error") {
      p.reject(AepError.fromMessage(m));
      return;
    }
    if (m.type === "handshake/resp") {
      if (!m.ok) {
        const code = m.error?.code ?? "unauthorized";
        p.reject(new AepError(code, m.error?.message ?? m.reason ?? "handshake refused", { reqId: m.req_id, ...(m.error ? { retryable: m.error.retryable } : {}), ...(m.error?.detail !== undefined ? { detail: m.error.detail } : {}) }));
        return;
      }
      if (m.session_id) this.#sessionId = m.session_id;
    }
    if (m.type !== requestTable[p.type].reply) {
      p.reject(new ConnectionError(`host answered ${p.type} with ${m.type}`));
      return;
    }
    p.resolve(m);
  }

  #end(err: Error) {
    if (this.#ended) return;
    this.#ended = err;
    for (const p of [...this.#pending.values()]) p.reject(err);
    for (const fn of this.#closeListeners) fn(err);
    this.#closeListeners.clear();
  }
}

/** An unbounded async queue: the producer never waits, as events must not hold up the reader of the connection. */
class Queue<T> implements AsyncIterable<T> {
  #items: T[] = [];
  #waiting: ((r: IteratorResult<T>) => void) | undefined;
  #done = false;

  push(v: T) {
    if (this.#done) return;
    if (this.#waiting) {
      const w = this.#waiting;
      this.#waiting = undefined;
      w({ value: v, done: false });
    } else this.#items.push(v);
  }

  end() {
    this.#done = true;
    if (this.#waiting) {
      const w = this.#waiting;
      this.#waiting = undefined;
      w({ value: undefined, done: true });
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.#items.length) return Promise.resolve({ value: this.#items.shift() as T, done: false });
        if (this.#done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((r) => (this.#waiting = r));
      },
    };
  }
}
