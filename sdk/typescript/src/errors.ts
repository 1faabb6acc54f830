import { errorRetryable, type ErrorCode, type ErrorMessage, type JsonValue } from "./messages.gen.js";

/**
 * An `error` reply of the host (spec §7), or a refused handshake: the
 * request failed with `code`; `retryable` says whether sending it again can
 * succeed; `detail` is the host's machine-readable detail, such as
 * `{ field }` for schema_violation, and `reason` its `detail.reason`, the
 * condition behind the code (schemas/errors/retryable.json).
 * parse_error and schema_violation mean the line breaks the contract; a
 * well-formed request refused for the session's state is runtime_error
 * with a reason: `not_found` for an id or name that exists nowhere the
 * session can see (the same answer for another session's or tenant's),
 * `episode_closed`, `invalid_action`, `denied`, `already_handshaken` …
 */
export class AepError extends Error {
  override readonly name = "AepError";
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly detail: JsonValue | undefined;
  /** The id of the request that failed; empty when the host could not read one. */
  readonly reqId: string;
  readonly capabilityName: string | undefined;

  constructor(code: ErrorCode, message: string, opts: { retryable?: boolean; detail?: JsonValue; reqId?: string; capabilityName?: string } = {}) {
    super(`${code}: ${message}`);
    this.code = code;
    // A code the host sent always comes with retryable; otherwise the
    // contract's value for the code stands.
    this.retryable = opts.retryable ?? errorRetryable[code];
    this.detail = opts.detail;
    this.reqId = opts.reqId ?? "";
    this.capabilityName = opts.capabilityName;
  }

  /** `detail.reason`, when the detail names one. */
  get reason(): string | undefined {
    const d = this.detail;
    const r = typeof d === "object" && d !== null && !Array.isArray(d) ? d["reason"] : undefined;
    return typeof r === "string" ? r : undefined;
  }

  /** The request named something that does not exist for the session (runtime_error, reason not_found). */
  get notFound(): boolean {
    return this.code === "runtime_error" && this.reason === "not_found";
  }

  /** The error an `error` message carries. */
  static fromMessage(m: ErrorMessage): AepError {
    const opts: { retryable: boolean; reqId: string; detail?: JsonValue; capabilityName?: string } = { retryable: m.retryable, reqId: m.req_id };
    if (m.detail !== undefined) opts.detail = m.detail;
    if (m.capability_name !== undefined) opts.capabilityName = m.capability_name;
    return new AepError(m.code, m.message, opts);
  }
}

/** The connection to the host ended (or could not be opened); pending requests fail with it. */
export class ConnectionError extends Error {
  override readonly name: string = "ConnectionError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * The host no longer has the client's session: the WebSocket ended (the
 * host closed it, or it dropped and could not be re-attached: 404, or
 * `reattachTimeoutSeconds` passed), the event stream ended, the host
 * cannot be reached (connection refused), or it
 * answered POST /send with 404 (no such session: its host is gone and the
 * proxy sent the request elsewhere), 503 (draining or closing) or 502 (a
 * proxy could not reach it). `delivered` is false when the message being
 * sent provably did not reach the session (404, 503, refused, a closed
 * WebSocket, or one whose idle check found it dead before the message was
 * written), so sending it to a new session cannot run it twice.
 */
export class SessionLostError extends ConnectionError {
  override readonly name: string = "SessionLostError";
  readonly delivered: boolean;
  constructor(message: string, options: { delivered?: boolean; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.delivered = options.delivered ?? true;
  }
}

/**
 * The operator terminated the session (the host's admin API): a request
 * was answered `runtime_error` with `detail.reason` `terminated`, the
 * WebSocket closed with code 4410, or the host answers the session's id
 * 404 `terminated`. The session and its processes are gone on purpose, so a
 * client made with `{ move: true }` does not move it: the client ends, and
 * every later request rejects with this error.
 */
export class SessionTerminatedError extends ConnectionError {
  override readonly name: string = "SessionTerminatedError";
}

/**
 * A client made with `{ move: true }` lost its session and could not move:
 * no new session opened before the move's deadline, the handshake was
 * refused, the restore failed, or the lost session left no snapshot and
 * `moveFresh` was not set (`cause` is then a NoSnapshotError). The client
 * has ended; every request rejects with it. Also the error of a request
 * refused unread by several sessions in turn.
 */
export class MoveFailedError extends ConnectionError {
  override readonly name: string = "MoveFailedError";
}

/**
 * Why a move failed when the lost session left no snapshot to restore: the
 * host answered `not_found` for `snapshotWaitSeconds` (its host died
 * without draining, or drained without operator.snapshot_on_drain). The
 * move's `error` and the `cause` of the client's MoveFailedError;
 * `moveFresh: true` carries on in the new, empty session instead.
 */
export class NoSnapshotError extends Error {
  override readonly name: string = "NoSnapshotError";
  readonly reason = "no_snapshot";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * Why a move failed when the lost session's newest snapshot covers less
 * than the client saw acknowledged (docs/DECISIONS.md, Points): the host
 * answered `point_gap` for `snapshotWaitSeconds` (or the draining host's
 * longer `snapshot_wait`). Restoring it would silently roll back
 * acknowledged work, so the move fails instead, unless the client was made
 * with `acceptGap: true`. `detail` is the host's: `snapshot_id`, `point`
 * (the snapshot's), `last_point` (the client's) and `lost`.
 */
export class PointGapError extends Error {
  override readonly name: string = "PointGapError";
  readonly reason = "point_gap";
  readonly detail: Record<string, unknown>;
  constructor(message: string, detail: unknown, options?: { cause?: unknown }) {
    super(message, options);
    this.detail = typeof detail === "object" && detail !== null ? (detail as Record<string, unknown>) : {};
  }
}

/**
 * A request was in flight when its session was lost, and the client (made
 * with `{ move: true }`) moved to a new session. The request may or may not
 * have run on the lost session; it is not sent again, since that could run
 * it twice. `sessionId` is the lost session's id; requests made after the
 * move go to the new one.
 */
export class RequestInterruptedError extends ConnectionError {
  override readonly name: string = "RequestInterruptedError";
  readonly reqId: string;
  readonly sessionId: string | undefined;
  constructor(reqId: string, sessionId: string | undefined, cause: unknown) {
    super(`request ${reqId} was in flight when session ${sessionId} was lost (${cause instanceof Error ? cause.message : String(cause)}); it may or may not have run and is not resent`, { cause });
    this.reqId = reqId;
    this.sessionId = sessionId;
  }
}
