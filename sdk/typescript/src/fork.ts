// Session fork from the client side (docs/DECISIONS.md, Session fork): one
// session/fork/req, then a connection to every fork over the transport the
// parent uses, each handshaken as the parent was.
import type { AepClient, RequestOptions } from "./client.js";
import type { SessionForkRespMessage } from "./messages.gen.js";
import type { Transport } from "./transports.js";

/** The handshake a fork is opened with; see AepClient.connect. */
export interface ForkHandshake {
  agentId: string;
  token: string;
  caps?: string[];
}

export interface ForkOptions extends RequestOptions {
  /** Fork from this snapshot of the session instead of its current state. */
  snapshotId?: string;
  /** The forks' handshake; by default the one this client's `connect` made. */
  handshake?: ForkHandshake;
}

/** The connected clients of a fork, `clients[i]` of `reply.forks[i]`. */
export interface Forks {
  /** The host's reply: `copy`, `not_forked`, `handshake_timeout`, the forks' handles. */
  reply: SessionForkRespMessage;
  clients: AepClient[];
  /** Closes every fork's client. */
  close(): Promise<void>;
}

/**
 * Forks the parent's session count ways and connects a handshaken client
 * to each fork with transport.attach (HTTP and WebSocket; a stdio host
 * serves one session). Every fork starts from the parent's state at the
 * request (working memory, episodes, files), or from the snapshot; each
 * then goes its own way, and the parent is unchanged. If a fork cannot be
 * reached or refuses its handshake, the forks already connected are closed
 * and the error is thrown; the others are closed by the host after
 * `reply.handshake_timeout`.
 */
export async function forkSession(
  parent: AepClient,
  transport: Transport,
  made: (t: Transport) => AepClient,
  hello: ForkHandshake | undefined,
  count: number,
  opts: ForkOptions = {},
): Promise<Forks> {
  const hs = opts.handshake ?? hello;
  if (!hs) throw new Error("fork: connect first, or pass handshake");
  const attach = transport.attach?.bind(transport);
  if (!attach) throw new Error("fork: this transport cannot reach another session (use HTTP or WebSocket)");
  const { snapshotId, handshake: _hs, ...request } = opts;
  const reply = await parent.sessionFork(snapshotId === undefined ? { count } : { count, snapshot_id: snapshotId }, request);
  const clients: AepClient[] = [];
  const close = async () => {
    await Promise.all(clients.map((c) => c.close()));
  };
  try {
    for (const f of reply.forks) {
      const c = made(await attach(f.session_id));
      clients.push(c);
      await c.connect(hs, request);
    }
  } catch (e) {
    await close();
    throw e;
  }
  return { reply, clients, close };
}
