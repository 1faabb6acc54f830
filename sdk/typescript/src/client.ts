import { randomBytes } from "node:crypto";
import { AepError, ConnectionError, MoveFailedError, NoSnapshotError, PointGapError, RequestInterruptedError, SessionLostError, SessionTerminatedError } from "./errors.js";
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
  type PointGap,
  type RequestType,
  type RequestTypes,
} from "./messages.gen.js";
import { forkSession, type ForkHandshake, type ForkOptions, type Forks } from "./fork.js";
import { exportTrajectories, type TrajectoryExport, type TrajectoryExportRequest } from "./trajectories.js";
import { openExchange, openHttp, openWebSocket, spawnStdio, type ExchangeOptions, type HttpOptions, type StdioSpawnOptions, type Transport, type WebSocketOptions } from "./transports.js";

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
  /**
   * The caller's W3C Trace Context traceparent
   * (`00-<trace id>-<span id>-<flags>`), sent as the envelope's
   * `traceparent` (schemas/envelope.json): a host that traces makes its
   * spans of the request children of that span; others ignore it.
   */
  traceparent?: string;
}

/** A request in flight with its events as an async iterator; see AepClient.stream. */
export interface RequestStream<T extends RequestType> {
  /** The request's events; the iteration ends when the reply arrives. */
  events: AsyncIterable<RequestTypes[T]["event"]>;
  /** The reply; an `error` reply rejects with AepError. */
  reply: Promise<RequestTypes[T]["reply"]>;
}

/** A request in flight: one object a request, its settling taking it out of the client's table. */
class Pending {
  /** This client sent `cancel` for it. */
  cancelSent = false;
  /** The abort listener of the request's signal, removed when it settles. */
  onAbort: (() => void) | undefined;

  constructor(
    readonly table: Map<string, Pending>,
    readonly id: string,
    readonly type: RequestType,
    readonly res: (m: HostMessage) => void,
    readonly rej: (e: unknown) => void,
    readonly onEvent: ((e: EventMessage) => void) | undefined,
    readonly signal: AbortSignal | undefined,
    /** Which of the client's sessions the request was sent on; -1 once it is settled by a loss. */
    public gen: number,
  ) {}

  resolve(m: HostMessage) {
    this.#settle();
    this.res(m);
  }

  reject(e: unknown) {
    this.#settle();
    this.rej(e);
  }

  #settle() {
    this.table.delete(this.id);
    if (this.onAbort) this.signal?.removeEventListener("abort", this.onAbort);
  }
}

/** Options of a client. */
export interface ClientOptions {
  /**
   * Survive the loss of the session (its host drained or died;
   * README.md, Surviving a drain): when the connection ends for good (a
   * WebSocket the host closed, or that dropped and could not be
   * re-attached; an event stream that could not be reopened) or the host
   * answers that it no longer has the session (404, 503, `shutting_down`;
   * a proxy's 502), the client opens a new session through the same URL
   * (retrying until `moveTimeoutSeconds`), handshakes as the last
   * handshake did, restores the lost session's newest snapshot
   * (`session/restore/req { from_session }`, waiting up to
   * `snapshotWaitSeconds` for it to appear), tells `onMove`, and carries
   * on. Requests in flight at the loss reject with RequestInterruptedError
   * and are not sent again; requests the old host refused unread, those
   * a WebSocket's idle check kept from a dead connection
   * (`idleCheckSeconds`), and those made during the move, go to the new
   * session. A move that fails
   * ends the client with MoveFailedError; so does a lost session that left
   * no snapshot (its `cause` is a NoSnapshotError), unless `moveFresh`.
   * HTTP and WebSocket only: a stdio host is one process.
   */
  move?: boolean;
  /** How long a move may take to reach a host, handshake and restore; default 30. */
  moveTimeoutSeconds?: number;
  /** How long a move waits for the lost session's snapshot to appear before it fails (or carries on fresh with `moveFresh`); default 5. */
  snapshotWaitSeconds?: number;
  /**
   * Let a move whose lost session left no snapshot carry on in the new,
   * empty session (`Move.fresh`) instead of ending the client with
   * MoveFailedError (NoSnapshotError): the lost session's state is gone.
   * Default false.
   */
  moveFresh?: boolean;
  /**
   * Let a move restore a snapshot that covers less than the client's
   * `point` once snapshotWaitSeconds passed without a newer one; the Move's
   * `gap` says what was lost. Without it such a move ends the client with
   * MoveFailedError (PointGapError): never a silent rollback. Default false.
   */
  acceptGap?: boolean;
}

/** A move from a lost session to a new one, given to `onMove` listeners and kept in `moves`. Session ids are bearer secrets: do not log them. */
export interface Move {
  /** The lost session's id, which the new session restored from. */
  fromSession: string;
  /** The new session's id; undefined when the move failed. */
  sessionId: string | undefined;
  /** The snapshot of fromSession that was restored, when one was. */
  snapshotId: string | undefined;
  /** The plugins whose state came back. */
  restored: string[];
  /**
   * True when fromSession left no snapshot (the host answered
   * `not_found` for snapshotWaitSeconds) and the client was made
   * with `moveFresh`: the new session carries on empty, and the lost
   * session's state is gone. Without `moveFresh` such a move fails with a
   * NoSnapshotError as its `error`.
   */
  fresh: boolean;
  /** How the old session was lost. */
  cause: Error;
  /** Why the move failed (the client has then ended with MoveFailedError); undefined when it succeeded. */
  error: Error | undefined;
  /** How long the move took, in milliseconds. */
  tookMs: number;
  /** The client's last seen point in fromSession, which the restore had to cover. */
  lastPoint: number;
  /** The point the new session resumed from (the snapshot's); 0 when the move failed or was fresh. */
  point: number;
  /** What was lost, when the client accepted a gap (`acceptGap`); undefined otherwise. */
  gap: PointGap | undefined;
}

/** A request refused unread by a session that is lost: it can go to the next one. */
class Refused extends Error {
  constructor(readonly reason: Error) {
    super(reason.message);
  }
}

/** How often a request refused unread is sent again, each time in a new session. */
const maxResends = 3;

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
  readonly #moveTimeoutMs: number;
  readonly #snapshotWaitMs: number;
  readonly #moveFresh: boolean;
  readonly #acceptGap: boolean;
  readonly #moves: Move[] = [];
  /** The highest point the current session's replies carried (docs/DECISIONS.md, Points). */
  #point = 0;
  #seq = 0;
  #sessionId: string | undefined;
  #ended: Error | undefined;
  #hello: ForkHandshake | undefined; // the handshake connect made, which forks repeat
  #closing = false;
  /** This client sent `shutdown`: its session is ending, and it asks nothing more of it. */
  #shut = false;
  /** Counts the sessions this client has had (a move starts the next). */
  #gen = 0;
  /** Why the current session was lost (move only), while a move runs. */
  #lost: Error | undefined;
  /** The move under way; it never rejects. */
  #moving: Promise<void> | undefined;
  /** The body of the last accepted handshake, which a move repeats. */
  #handshake: Body<HandshakeReqMessage> | undefined;

  /** Starts a client on a transport; use the static openers for the usual ones. */
  constructor(transport: Transport, options: ClientOptions = {}) {
    super();
    if (options.move && !transport.newSession) throw new TypeError("move needs a transport that can open a new session (HTTP, WebSocket)");
    this.#move = options.move ?? false;
    this.#moveTimeoutMs = (options.moveTimeoutSeconds ?? 30) * 1000;
    this.#snapshotWaitMs = (options.snapshotWaitSeconds ?? 5) * 1000;
    this.#moveFresh = options.moveFresh ?? false;
    this.#acceptGap = options.acceptGap ?? false;
    this.#t = transport;
    this.#sessionId = transport.sessionId;
    this.#attach(transport);
  }

  /**
   * Connects over WebSocket, e.g. "ws://127.0.0.1:8765/ws". A connection
   * that drops is re-attached to the same session for up to
   * `reattachTimeoutSeconds` (openWebSocket); requests in flight meanwhile
   * get their replies, and new ones wait for the new connection. The first
   * request after `idleCheckSeconds` without a frame waits for a ping's
   * answer (WebSocketOptions).
   */
  static async websocket(url: string, opts?: WebSocketOptions & ClientOptions): Promise<AepClient> {
    return new AepClient(await openWebSocket(url, opts), opts);
  }

  /** Connects over HTTP+SSE, e.g. "http://127.0.0.1:8765". */
  static async http(baseUrl: string, opts?: HttpOptions & ClientOptions): Promise<AepClient> {
    return new AepClient(await openHttp(baseUrl, opts), opts);
  }

  /**
   * Connects over the single exchange, e.g. "http://127.0.0.1:8765": each
   * request one POST /send answered with its reply, nothing held open
   * between requests (openExchange).
   */
  static async exchange(baseUrl: string, opts?: ExchangeOptions & ClientOptions): Promise<AepClient> {
    return new AepClient(await openExchange(baseUrl, opts), opts);
  }

  /**
   * Spawns a host over stdio, e.g. `AepClient.stdio("aep", ["serve", "--stdio"])`.
   * The host starts with the handshake, whose token becomes its
   * AEP_AUTH_TOKEN (spawnStdio); its logs are discarded unless `opts.stderr` says otherwise.
   */
  static stdio(command: string, args: string[], opts?: StdioSpawnOptions): AepClient {
    return new AepClient(spawnStdio(command, args, opts));
  }

  /** The session's id, known after the handshake (or from the transport); a move changes it. */
  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  /**
   * The highest point the current session's replies carried, one per
   * acknowledged state-changing request (docs/DECISIONS.md, Points); a
   * restore's reply sets it to the point the session resumed from. Pass it
   * as `last_point` when restoring this session elsewhere.
   */
  get point(): number {
    return this.#point;
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

  /**
   * Exports recorded trajectories (session/trajectory/export,
   * docs/trajectories.md), every page: this session's, a fork's whole
   * episode, a fork group's episodes (`group`) or a session's descendants
   * (`descendants`), the prefix repeated, once or not at all (`prefix`),
   * as records or chat samples (`format`). `text` is the bytes `aep export
   * trajectories` and the other clients write.
   */
  exportTrajectories(req?: TrajectoryExportRequest, opts?: RequestOptions): Promise<TrajectoryExport> {
    return exportTrajectories(this, req, opts);
  }

  override request<T extends RequestType>(type: T, body: Body<RequestTypes[T]["request"]>, options: RequestOptions = {}): Promise<RequestTypes[T]["reply"]> {
    if (this.#ended) return Promise.reject(this.#ended);
    // The host would only refuse it (or, with move, it would move the session this client ended).
    if (this.#shut) return Promise.reject(new ConnectionError("the session is shutting down: this client sent shutdown"));
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    if (type === "handshake/req") {
      return this.#send(type, body, options, true).then((r) => {
        this.#handshake = body as Body<HandshakeReqMessage>;
        return r;
      });
    }
    return this.#requestMoving(type, body, options, 0);
  }

  #requestMoving<T extends RequestType>(type: T, body: Body<RequestTypes[T]["request"]>, options: RequestOptions, attempt: number): Promise<RequestTypes[T]["reply"]> {
    // Requests made during a move go to the new session; otherwise they
    // are sent at once, so they go out in the order they are made.
    if (this.#moving) return this.#moving.then(() => this.#requestMoving(type, body, options, attempt));
    const r = this.#send(type, body, options, true);
    if (!this.#move) return r;
    return r.catch((e: unknown) => {
      if (!(e instanceof Refused)) throw e;
      if (attempt >= maxResends) throw new MoveFailedError(`refused by ${attempt + 1} sessions in turn: ${e.reason.message}`, { cause: e.reason });
      return this.#requestMoving(type, body, options, attempt + 1);
    });
  }

  #send<T extends RequestType>(type: T, body: Body<RequestTypes[T]["request"]>, options: RequestOptions, mayMove: boolean): Promise<RequestTypes[T]["reply"]> {
    if (this.#ended) return Promise.reject(this.#ended);
    const { signal, onEvent, traceparent } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const id = this.#nextId();
    const sent = new Promise<RequestTypes[T]["reply"]>((resolve, reject) => {
      const p = new Pending(this.#pending, id, type, resolve as (m: HostMessage) => void, reject, onEvent, signal, this.#gen);
      this.#pending.set(id, p);
      if (signal) {
        p.onAbort = () => {
          // The host answers the request `cancelled` (or its reply, if it
          // was already on its way); that answer settles the promise.
          p.cancelSent = true;
          this.notify("cancel", { req_id: id }).catch((e: unknown) => this.#pending.get(id)?.reject(e));
        };
        signal.addEventListener("abort", p.onAbort, { once: true });
      }
      const line = encodeLine(body, type, id, traceparent);
      const t = this.#t;
      const failed = (e: unknown) => this.#sendFailed(id, e, mayMove);
      if (!t.sendNow?.(line, failed)) t.send(line, { events: onEvent !== undefined || this.#eventListeners.size > 0 }).catch(failed);
    });
    // Only a client that moves is refused (Refused): no promise in between for the others.
    if (!this.#move) return sent;
    return sent.catch((e: unknown) => {
      // A refusal is for request() to act on; the move's own requests see the host's word.
      throw e instanceof Refused && !mayMove ? e.reason : e;
    });
  }

  #movable(): boolean {
    return this.#move && !this.#closing && !this.#shut && !this.#ended && this.#handshake !== undefined;
  }

  /** What a failed send means for its request; with move, a loss of the session. */
  #sendFailed(id: string, err: unknown, mayMove: boolean) {
    const p = this.#pending.get(id);
    if (!p) return;
    if (err instanceof SessionTerminatedError) {
      this.#end(err);
      return p.reject(err);
    }
    if (!this.#movable() || !(err instanceof ConnectionError)) return p.reject(err);
    // Perhaps sent, perhaps not: the session may live on; the transport's end tells.
    if (!(err instanceof SessionLostError)) return p.reject(new RequestInterruptedError(id, this.#sessionId, err));
    const sid = this.#sessionId;
    const gen = p.gen;
    p.gen = -1;
    this.#sessionLost(gen, err);
    p.reject(err.delivered || !mayMove ? new RequestInterruptedError(id, sid, err) : new Refused(err));
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
    const sent = this.#t.send(encodeLine(body, type, this.#nextId(), undefined));
    // What is in flight gets its reply; a new request fails at once (request).
    if (type === "shutdown") this.#shut = true;
    return sent;
  }

  /**
   * Sends one line as it is. For tests of a host's answer to a broken line:
   * its `error` arrives at onStray, as it names no request of this client.
   */
  sendLine(line: string): Promise<void> {
    if (this.#ended) return Promise.reject(this.#ended);
    return this.#t.send(line);
  }

  /**
   * Asks the host to drain and end this session (its requests get their
   * replies first). Requests made afterwards reject at once with
   * ConnectionError, and a client made with `{ move: true }` does not move
   * away from the session it ended.
   */
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

  /**
   * Ends the session on the host — a `shutdown` with no grace, so what is
   * still in flight is cancelled — then the transport; requests still in
   * flight reject with ConnectionError. Over every transport the session
   * ends now, rather than when it idles out (HTTP) or when a WebSocket's
   * re-attach grace passes: abandoned sessions would otherwise stay, and a
   * drain would spend its time saving them. Call `shutdown()` first to let
   * requests in flight finish.
   */
  async close(): Promise<void> {
    const live = this.#handshake !== undefined && !this.#ended && !this.#lost && !this.#closing;
    this.#closing = true;
    if (live) {
      // Best effort, bounded: a session already gone needs no shutdown.
      await within(this.#t.send(JSON.stringify({ type: "shutdown", id: this.#nextId(), proto: "1.0", ts: Date.now() / 1000, timeout: 0 })), Date.now() + 2000).catch(() => {});
    }
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
        // A session the operator terminated is never moved.
        if (e instanceof SessionTerminatedError) {
          if (gen === this.#gen) this.#end(e);
        } else if (this.#movable()) this.#sessionLost(gen, e);
        else if (gen === this.#gen) this.#end(e);
      },
    );
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
    const point = (m as { point?: unknown }).point;
    if (typeof point === "number" && p.gen === this.#gen && !this.#lost) {
      // The current session's point: the highest its replies carried; a
      // restore resumes from its own.
      if (m.type === "session/restore/resp" || point > this.#point) this.#point = point;
    }
    if (m.type === "error") {
      const e = AepError.fromMessage(m);
      // Cancelled by the host, not by us: it closes the session.
      const reason = e.code === "cancelled" && !p.cancelSent ? "session_ended" : reasonOf(e.detail);
      if (reason === "terminated") {
        // The operator ended the session: the client ends with it rather than move it.
        p.reject(e);
        this.#end(new SessionTerminatedError("the operator terminated the session", { cause: e }));
        return;
      }
      if ((reason === "shutting_down" || reason === "session_ended") && this.#movable() && p.gen === this.#gen) {
        const gen = p.gen;
        if (reason === "shutting_down") {
          // Refused unread: the session is ending. It can go to the next one.
          p.gen = -1;
          p.reject(new Refused(e));
        }
        // session_ended: it was running when the session ended: interrupted.
        this.#sessionLost(gen, e);
        return;
      }
      p.reject(e);
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

  /** Session number gen is gone: what was sent on it rejects with RequestInterruptedError, and a move starts at once. */
  #sessionLost(gen: number, err: Error) {
    if (gen !== this.#gen || this.#ended || this.#closing) return;
    for (const [id, p] of [...this.#pending]) {
      if (p.gen === gen) p.reject(new RequestInterruptedError(id, this.#sessionId, err));
    }
    if (this.#lost) return;
    this.#lost = err;
    this.#moving = this.#moveNow().finally(() => {
      this.#moving = undefined;
    });
  }

  /** Opens a new session and restores the lost one into it; on failure the client ends with MoveFailedError. Never rejects. */
  async #moveNow(): Promise<void> {
    const from = this.#sessionId ?? "";
    const lastPoint = this.#point;
    const cause = this.#lost ?? new ConnectionError("session lost");
    const started = Date.now();
    const deadline = started + this.#moveTimeoutMs;
    const old = this.#t;
    await old.close().catch(() => {});
    let move: Move;
    try {
      await this.#openSession(old, deadline);
      const { snapshotId, restored, point, gap } = await this.#restoreFrom(from, lastPoint, waitHint(cause), deadline);
      if (this.#closing || this.#ended) throw this.#ended ?? new ConnectionError("client closed");
      this.#lost = undefined;
      this.#point = point;
      move = { fromSession: from, sessionId: this.#sessionId, snapshotId, restored, fresh: snapshotId === undefined, cause, error: undefined, tookMs: Date.now() - started, lastPoint, point, gap };
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      this.#sessionId = from;
      await this.#t.close().catch(() => {});
      move = { fromSession: from, sessionId: undefined, snapshotId: undefined, restored: [], fresh: false, cause, error: err, tookMs: Date.now() - started, lastPoint, point: 0, gap: undefined };
      this.#end(new MoveFailedError(`moving to a new session failed: ${err.message}`, { cause: err })); // not the lost id: a bearer secret, and messages get logged
    }
    this.#moves.push(move);
    for (const fn of this.#moveListeners) {
      try {
        fn(move);
      } catch {
        // A listener's failure is not the move's.
      }
    }
  }

  /**
   * A new session through old's URL, handshaken as the last one was;
   * retried with back-off until deadline (a proxy may still send a new
   * session to a host that is going away). A refused handshake is final.
   */
  async #openSession(old: Transport, deadline: number): Promise<void> {
    let wait = 50;
    for (;;) {
      let t: Transport | undefined;
      try {
        const opening = old.newSession!();
        t = await within(opening, deadline, () => void opening.then((late) => late.close(), () => {}));
        if (this.#closing || this.#ended) {
          await t.close();
          throw this.#ended ?? new ConnectionError("client closed");
        }
        this.#gen++;
        this.#t = t;
        this.#sessionId = t.sessionId;
        this.#attach(t);
        await within(this.#send("handshake/req", this.#handshake!, {}, false), deadline);
        return;
      } catch (e) {
        if (e instanceof AepError || this.#closing || this.#ended) throw e;
        if (t) await t.close().catch(() => {});
        if (Date.now() + wait > deadline) throw new ConnectionError(`no new session before the move's deadline: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(2 * wait, 1000);
      }
    }
  }

  /**
   * Restores the newest snapshot of from that covers lastPoint, waiting up
   * to snapshotWaitSeconds (or the draining host's longer hint, ms) for one
   * to appear: its host snapshots as it drains, which a proxy may notice
   * before. When there is none by then, rejects with NoSnapshotError, or
   * with moveFresh gives none; when there is only an older one, rejects
   * with PointGapError, or with acceptGap restores it and gives the gap.
   */
  async #restoreFrom(from: string, lastPoint: number, hintMs: number, deadline: number): Promise<{ snapshotId: string | undefined; restored: string[]; point: number; gap: PointGap | undefined }> {
    const waitMs = Math.max(this.#snapshotWaitMs, hintMs);
    const until = Date.now() + waitMs;
    let accept = false;
    for (;;) {
      try {
        const body = { from_session: from, last_point: lastPoint, ...(accept ? { accept_gap: true } : {}) };
        const r = await within(this.#send("session/restore/req", body, {}, false), deadline);
        return { snapshotId: r.snapshot_id, restored: r.restored, point: r.from_point ?? 0, gap: r.gap };
      } catch (e) {
        if (e instanceof AepError && reasonOf(e.detail) === "store_unavailable" && Date.now() + 1000 < deadline) {
          // The store is down and the host waited for it already: ask again
          // until the move's deadline, never settle for less.
          await new Promise((r) => setTimeout(r, 1000));
          continue;
        }
        if (e instanceof AepError && reasonOf(e.detail) === "point_gap") {
          // An older snapshot than the client saw: the draining host may
          // not have written its own yet.
          if (Date.now() + 200 > until) {
            if (this.#acceptGap) {
              accept = true;
              continue;
            }
            throw new PointGapError(`the lost session's newest snapshot does not hold everything acknowledged (point_gap) after ${waitMs / 1000}s: ${e.message}`, e.detail, { cause: e });
          }
          await new Promise((r) => setTimeout(r, 200));
          continue;
        }
        // not_found; hosts before it said unknown_snapshot, and a fleet in
        // a rolling upgrade may still hold one.
        if (!(e instanceof AepError) || (reasonOf(e.detail) !== "not_found" && reasonOf(e.detail) !== "unknown_snapshot")) throw e;
        if (Date.now() + 200 > until) {
          if (this.#moveFresh) return { snapshotId: undefined, restored: [], point: 0, gap: undefined }; // it left none: this session stays, fresh
          throw new NoSnapshotError(`the lost session left no snapshot (no_snapshot): the host answered not_found for ${waitMs / 1000}s (${e.message})`, { cause: e });
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }
}

/** How long a draining host said its snapshot of the session may take (shutting_down's detail.snapshot_wait), in ms; 0 when it said nothing. */
function waitHint(cause: Error): number {
  const e = cause instanceof Refused ? cause.reason : cause;
  if (!(e instanceof AepError) || reasonOf(e.detail) !== "shutting_down") return 0;
  const w = (e.detail as { snapshot_wait?: unknown }).snapshot_wait;
  return typeof w === "number" && w > 0 && w <= 3600 ? w * 1000 : 0;
}

/**
 * One message's line: the envelope, then the body's fields (type and id
 * are the SDK's own, ASCII without quotes), written out rather than through
 * an object spread of both, which cost a request some microseconds: a new
 * object of a new shape to stringify. A body that named an envelope field
 * itself (only an untyped caller can) makes a duplicate key, which the host
 * refuses (wire.Scan).
 */
function encodeLine(body: object, type: string, id: string, traceparent: string | undefined): string {
  let env = `{"type":"${type}","id":"${id}","proto":"1.0","ts":${Date.now() / 1000}`;
  if (traceparent !== undefined) env += `,"traceparent":${JSON.stringify(traceparent)}`;
  const b = JSON.stringify(body);
  return b.length > 2 ? `${env},${b.slice(1)}` : `${env}}`;
}

function reasonOf(detail: unknown): string | undefined {
  const r = typeof detail === "object" && detail !== null ? (detail as { reason?: unknown }).reason : undefined;
  return typeof r === "string" ? r : undefined;
}

/** p, or a ConnectionError once deadline (epoch ms) passes; onLate runs then, to clean up what p brings later. */
function within<T>(p: Promise<T>, deadline: number, onLate?: () => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      onLate?.();
      reject(new ConnectionError("the move's deadline passed"));
    }, Math.max(0, deadline - Date.now()));
    p.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
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
