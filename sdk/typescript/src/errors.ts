import { errorRetryable, type ErrorCode, type ErrorMessage, type JsonValue } from "./messages.gen.js";

/**
 * An `error` reply of the host (spec §7), or a refused handshake: the
 * request failed with `code`; `retryable` says whether sending it again can
 * succeed; `detail` is the host's machine-readable detail, such as
 * `{ field }` for schema_violation.
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
  override readonly name = "ConnectionError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
