// Package memory is the `memory` capability (spec §1, 2.11, 4.2):
// module `aep.memory.builtin`, serving memory/init, store, retrieve,
// recall, forget and stats (schemas/memory.json).
//
// Tiers:
//   - working: a session's in-memory key-value store, with optional limits
//     on entries and bytes and a full policy ("reject" or "evict_lru"),
//     saved in session snapshots ([Plugin.Snapshot]) and dropped when the
//     session ends. No session reads another's working memory.
//   - episodic: an append-ordered, timestamped event log in the host store
//     (ent table memory_episodic), persistent across sessions and restarts.
//   - semantic: key-value entries with tags and TTL, upserted by key, in
//     memory_semantic, searched in the database: SQLite FTS5 (porter
//     stemming) or PostgreSQL tsvector (GIN, a stop-word-keeping copy of
//     the english configuration).
//
// Persistent tiers are scoped by the memory/init namespace and
// `scope.agent`, and sit behind [Backend], implemented for both stores
// server/store opens (SQLite and PostgreSQL). Both split text into words
// the same way ([terms]) and stem them, so an entry matches the same queries
// on either; the engine only finds the matches, and every match is scored
// from its own text ([matcher]), the same on every tier and store, and
// ranked by that score (search.go). TTLs use
// [Plugin.Clock]: an expired entry is hidden from every read at once and a
// background collector ([Plugin.Collect], every collect_interval) deletes it.
//
// # Scope views for subagents
//
// A child session's working store resolves through the kernel's child link
// (server.Session.Parent and server.ChildInfo.MemoryScope). The kernel
// tells the plugin of a new child through server.ChildObserver
// ([Plugin.ChildSpawned]) before the child can be reached, so the
// subagents capability never names this one.
//
// `shared` reads and writes the parent's store (as the parent resolves it,
// so chains of children work); `restricted` reads it, and a store or forget
// in the working tier fails with [ErrReadOnly] (schema_violation on the
// wire); `isolated` starts empty; `snapshot` is a copy taken at spawn. A
// child still opens its own memory_id with memory/init; the namespace it
// names selects the entries it sees, as for any session.
package memory
