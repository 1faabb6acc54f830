// aep-client: a client of aep hosts (the Agent-Environment Protocol) for
// Node >= 20. The message types are generated from the contract
// (gen/contract) by tools/tsgen; see README.md.
export { AepClient, type ClientOptions, type Move, type RequestOptions, type RequestStream } from "./client.js";
export { AepError, ConnectionError, MoveFailedError, NoSnapshotError, PointGapError, RequestInterruptedError, SessionLostError, SessionTerminatedError } from "./errors.js";
export { type ForkHandshake, type ForkOptions, type Forks } from "./fork.js";
export { openHttp, openWebSocket, spawnStdio, type HttpOptions, type StdioSpawnOptions, type Transport, type WebSocketOptions, type WebSocketTransport } from "./transports.js";
export * from "./messages.gen.js";
