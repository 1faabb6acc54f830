import { randomBytes } from "node:crypto";
import { AepError, ConnectionError, RequestInterruptedError, SessionLostError } from "./errors.js";
import {
  Methods,
  requestTable,
  type Body,
  type EventMessage,
  type HandshakeReqMessage,
  type HandshakeRespMessage,
  type HostMessage,
  type NotificationType,
  type NotificationTypes,
  type RequestType,
  type RequestTypes,
} from "./messages.gen.js";
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
  /** Which of the client's sessions the request was sent on; -1 while it waits to be sent again. */
  gen: number;
}

/** Options of a client. */
export interface ClientOptions {
  /**
   * Survive the loss of the session (its host drained or died,
   * docs/deploy.md): when the connection drops or the host answers that it
   * no longer has the session (404, 503; a proxy's 502), the next request
   * opens a new session through the same URL, handshakes as the last
   * handshake did, restores the lost session's newest snapshot
   * (`session/restore/req { from_session }`), tells `onMove`, and goes to
   * the new session. Requests in flight at the loss reject with
   * RequestInterruptedError and are not sent again. HTTP and WebSocket
   * only: a stdio host is one process.
   */
  move?: boolean;
}

/** A move from a lost session to a new one, given to `onMove` listeners. */
export interface Move {
  /** The lost session's id, which the new session restored from. */
  fromSession: string;
  /** The new session's id. */
  sessionId: string;
  /**
   * True when the new session restored the newest snapshot of
   * `fromSession`; false when that session left none (the host answered
   * `unknown_snapshot`): the new session is then fresh.
   */
  restored: boolean;
  /** The snapshot restored, when one was. */
  snapshotId: string | undefined;
  /** How the old session was lost. */
  reason: Error;
}

/**
 * A connection to one session of an aep host. Every request type has a
 * typed method (generated from the contract, tools/tsgen), e.g.
 * `toolCall({ tool_name, arguments })`; start with `handshake` or
 * `connect`. Requests may run concurrently; each settles with its reply.
 */
export class AepClient extends Methods<RequestOptions> {
  #t: Transport;
  readonly #pending = new Map<string, Pending>();
  readonly #prefix = randomBytes(4).toString("hex");
  readonly #eventListeners = new Set<(e: EventMessage) => void>();
  readonly #strayListeners = new Set<(m: HostMessage) => void>();
  readonly #closeListeners = new Set<(e: Error) => void>();
  readonly #moveListeners = new Set<(m: Move) => void>();
  readonly #move: boolean;
  readonly #moves: Move[] = [];
  #seq = 0;
  #sessionId: string | undefined;
  #ended: Error | undefined;
  #closing = false;
  /** Counts the sessions this client has had (a move starts the next). */
  #gen = 0;
  /** Why the current session was lost (move only); undefined while it lives. */
  #lost: Error | undefined;
  #moving: Promise<void> | undefined;
  /** The body of the last accepted handshake, which a move repeats. */
  #handshake: Body<HandshakeReqMessage> | undefined;

  /** Starts a client on a transport; use the static openers for the usual ones. */
  constructor(transport: Transport, options: ClientOptions = {}) {
    super();
    if (options.move && !transport.newSession) throw new TypeError("move needs a transport that can open a new session (HTTP, WebSocket)");
    this.#move = options.move ?? false;
    this.#t = transport;
    this.#sessionId = transport.sessionId;
    this.#attach(transport);
  }

  /** Connects over WebSocket, e.g. "ws://127.0.0.1:8765/ws". */
  static async websocket(url: string, opts?: WebSocketOptions & ClientOptions): Promise<AepClient> {
    return new AepClient(await openWebSocket(url, opts), opts);
  }

  /** Connects over HTTP+SSE, e.g. "http://127.0.0.1:8765". */
  static async http(baseUrl: string, opts?: HttpOptions & ClientOptions): Promise<AepClient> {
    return new AepClient(await openHttp(baseUrl, opts), opts);
  }

  /** Spawns a host over stdio, e.g. `AepClient.stdio("aep", ["serve", "--stdio"])`. */
  static stdio(command: string, args: string[], opts?: StdioSpawnOptions): AepClient {
    return new AepClient(spawnStdio(command, args, opts));
  }

  /** The session's id, known after the handshake (or from the transport); a move changes it. */
  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  /** The moves made so far (`{ move: true }`), oldest first. */
  get moves(): readonly Move[] {
    return [...this.#moves];
  }

  /** Why the connection ended; undefined while it is open. */
  get closedReason(): Error | undefined {
    return this.#ended;
  }

  /**
   * Handshakes (spec §2.4) with the agent's id, the host's token and the
   * capabilities wanted. A refused handshake rejects with AepError.
   */
  connect(opts: { agentId: string; token: string; caps?: string[] }, options?: RequestOptions): Promise<HandshakeRespMessage> {
    return this.handshake({ agent_id: opts.agentId, auth_token: opts.token, agent_caps: opts.caps ?? [] }, options);
  }

  override request<T extends RequestType>(type: T, body: Body<RequestTypes[T]["request"]>, options: RequestOptions = {}): Promise<RequestTypes[T]["reply"]> {
    if (this.#ended) return Promise.reject(this.#ended);
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    if (type === "handshake/req") {
      return this.#send(type, body, options, true).then((r) => {
        this.#handshake = body as Body<HandshakeReqMessage>;
        return r;
      });
    }
    // Not lost: sent at once, so requests go out in the order they are made.
    if (!this.#lost) return this.#send(type, body, options, true);
    return this.#ensureSession().then(() => this.#send(type, body, options, true));
  }

  #send<T extends RequestType>(type: T, body: Body<RequestTypes[T]["request"]>, options: RequestOptions, mayMove: boolean): Promise<RequestTypes[T]["reply"]> {
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
        gen: this.#gen,
      });
      if (signal) {
        onAbort = () => {
          // The host answers the request `cancelled` (or its reply, if it
          // was already on its way); that answer settles the promise.
          this.notify("cancel", { req_id: id }).catch((e: unknown) => this.#pending.get(id)?.reject(e));
        };
        signal.addEventListener("abort", onAbort, { once: true });
      }
      const line = JSON.stringify({ ...body, type, id, proto: "1.0", ts: Date.now() / 1000 });
      this.#t.send(line).catch((e: unknown) => this.#sendFailed(id, line, e, mayMove));
    });
  }

  /** What a failed send means for its request; with move, perhaps a move and one more try. */
  #sendFailed(id: string, line: string, err: unknown, mayMove: boolean) {
    const p = this.#pending.get(id);
    if (!p) return;
    if (!this.#move || this.#closing || this.#ended || !(err instanceof ConnectionError)) return p.reject(err);
    if (!(err instanceof SessionLostError)) return p.reject(new RequestInterruptedError(id, this.#sessionId, err));
    if (err.delivered || !mayMove) {
      // It may have reached the session: interrupted, like every request in flight there.
      this.#sessionLost(p.gen, err);
      return;
    }
    // Refused unread: it goes to the new session, once.
    const gen = p.gen;
    p.gen = -1;
    this.#sessionLost(gen, err);
    this.#ensureSession()
      .then(() => {
        p.gen = this.#gen;
        return this.#t.send(line);
      })
      .catch((e: unknown) => {
        if (e instanceof SessionLostError && p.gen === this.#gen) this.#sessionLost(p.gen, e);
        else p.reject(e);
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
    // cancel and shutdown: nothing to say to a lost session, and no reason to move for them.
    if (this.#lost) return Promise.reject(new SessionLostError(`session ${this.#sessionId} was lost: ${this.#lost.message}`, { cause: this.#lost }));
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

  /**
   * Calls fn after each move (`{ move: true }`), once the new session has
   * handshaken and restored; returns a function that stops it.
   */
  onMove(fn: (m: Move) => void): () => void {
    this.#moveListeners.add(fn);
    return () => this.#moveListeners.delete(fn);
  }

  /** Calls fn once when the connection ends (with `{ move: true }`: when the client is closed, not at a move). */
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
    this.#closing = true;
    await this.#t.close();
    this.#end(new ConnectionError("client closed"));
  }

  #attach(t: Transport) {
    const gen = this.#gen;
    t.start(
      (line) => {
        if (gen === this.#gen) this.#line(line);
      },
      (err) => {
        const e = err ?? new ConnectionError("connection closed");
        if (this.#move && !this.#closing && this.#handshake) this.#sessionLost(gen, e);
        else if (gen === this.#gen) this.#end(e);
      },
    );
  }

  /** Session number gen is gone: what was sent on it rejects with RequestInterruptedError, and the next request moves. */
  #sessionLost(gen: number, err: Error) {
    if (gen !== this.#gen || this.#ended) return;
    this.#lost ??= err;
    for (const [id, p] of [...this.#pending]) {
      if (p.gen === gen) p.reject(new RequestInterruptedError(id, this.#sessionId, err));
    }
  }

  /** Moves if the session was lost; requests made meanwhile wait for the one move. */
  #ensureSession(): Promise<void> {
    if (!this.#lost) return Promise.resolve();
    this.#moving ??= this.#moveNow().finally(() => {
      this.#moving = undefined;
    });
    return this.#moving;
  }

  async #moveNow(): Promise<void> {
    const from = this.#sessionId ?? "";
    const reason = this.#lost ?? new ConnectionError("session lost");
    const old = this.#t;
    await old.close().catch(() => {});
    let t: Transport;
    try {
      t = await old.newSession!();
    } catch (e) {
      throw new ConnectionError(`moving from session ${from}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
    if (this.#closing || this.#ended) {
      await t.close();
      throw this.#ended ?? new ConnectionError("client closed");
    }
    this.#gen++;
    this.#t = t;
    this.#sessionId = t.sessionId;
    this.#attach(t);
    let snapshotId: string | undefined;
    try {
      await this.#send("handshake/req", this.#handshake!, {}, false);
      try {
        snapshotId = (await this.#send("session/restore/req", { from_session: from }, {}, false)).snapshot_id;
      } catch (e) {
        // The lost session left no snapshot: this session stays, fresh.
        if (!(e instanceof AepError && isUnknownSnapshot(e.detail))) throw e;
      }
    } catch (e) {
      // Nothing moved: the client stays lost, and the next request tries
      // again from the same old session.
      this.#sessionId = from;
      await t.close().catch(() => {});
      if (e instanceof AepError) throw e; // a refused handshake or restore, as the host said it
      throw new ConnectionError(`moving from session ${from}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
    this.#lost = undefined;
    const m: Move = { fromSession: from, sessionId: this.#sessionId ?? "", restored: snapshotId !== undefined, snapshotId, reason };
    this.#moves.push(m);
    for (const fn of this.#moveListeners) fn(m);
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

function isUnknownSnapshot(detail: unknown): boolean {
  return typeof detail === "object" && detail !== null && (detail as { reason?: unknown }).reason === "unknown_snapshot";
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
