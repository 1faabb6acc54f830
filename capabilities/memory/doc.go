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
//     memory_semantic, searched in the database: SQLite FTS5 with bm25, or
//     PostgreSQL tsvector (GIN) with ts_rank.
//
// Persistent tiers are scoped by the memory/init namespace and
// `scope.agent`, and sit behind [Backend], implemented for both stores
// server/store opens (SQLite and PostgreSQL). Both split text into words
// the same way ([terms]), so an entry matches the same queries on either;
// scores differ in scale (bm25 weighs rare words, ts_rank does not). TTLs use
// [Plugin.Clock]: an expired entry is hidden from every read at once and a
// background collector ([Plugin.Collect], every collect_interval) deletes it.
//
// # Scope views for subagents
//
// A child session's working store resolves through the parent link
// ([Link]; the kernel's server.Session.Parent by default) and its memory
// [Scope]. Whoever spawns the child calls [Plugin.SetScope] right after the
// kernel creates it and before it serves a request. The subagents plugin
// does so without importing this package, through
// server.Host.PluginImpl and a local interface of the same method:
//
//	type memoryScopes interface {
//		SetScope(childID, parentID, scope string) error
//	}
//	impl, _ := host.PluginImpl("memory") // the memory plugin's config name
//	if ms, ok := impl.(memoryScopes); ok {
//		err := ms.SetScope(child.ID(), parent.ID(), "snapshot")
//	}
//
// `shared` reads and writes the parent's store (as the parent resolves it,
// so chains of children work); `restricted` reads it, and a store or forget
// in the working tier fails with [ErrReadOnly] (schema_violation on the
// wire); `isolated` starts empty; `snapshot` is a copy taken in SetScope. A
// child without a scope has its own store, like `isolated`. A child still
// opens its own memory_id with memory/init; the namespace it names selects
// the entries it sees, as for any session.
package memory
