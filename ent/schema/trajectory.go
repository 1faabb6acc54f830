package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TrajectoryRecord is one record of a session's recorded trajectory
// (server/persist/trajectory.go, schemas/records/trajectory.json): a request, a
// reply, an event or an error the session exchanged, body included, with
// every secret the kernel knew redacted before it was written.
type TrajectoryRecord struct {
	ent.Schema
}

// Fields of the TrajectoryRecord.
func (TrajectoryRecord) Fields() []ent.Field {
	return []ent.Field{
		// Owner is the owner key of the session (server/persist/stored.go,
		// ownerKey): a digest of its transport id, which is never stored.
		field.String("owner").NotEmpty().Immutable(),
		// Handle is the session's public handle, what the operator exports by.
		field.String("handle").NotEmpty().Immutable(),
		// Seq orders the session's records from 0.
		field.Int64("seq").Immutable(),
		// Data is the record as JSON, one line of the export.
		field.Bytes("data").NotEmpty().Immutable(),
		field.Time("created_at").Default(time.Now).Immutable(),
		// Tenant is the session's tenant (server.StorageTenant: "" for
		// the default one); an export reads only its own tenant's.
		field.String("tenant").Default("").Immutable(),
		// Root is the handle of the session's lineage root (itself, or a
		// fork's first ancestor); ForkGroup a fork's sibling group ("" for
		// a root). An export finds a lineage's sessions and a group's
		// forks by them (server/persist/trajexport.go).
		field.String("root").Default("").Immutable(),
		field.String("fork_group").Default("").Immutable(),
		// ParentOwner is a fork's parent's owner key: a session presenting
		// the parent's id reads the fork's records by lineage, even when
		// the parent recorded nothing.
		field.String("parent_owner").Default("").Immutable(),
	}
}

// Indexes of the TrajectoryRecord.
func (TrajectoryRecord) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("owner", "seq"),
		index.Fields("handle", "seq"),
		index.Fields("created_at"),
		index.Fields("tenant", "root", "seq"),
		index.Fields("tenant", "fork_group", "seq"),
		index.Fields("tenant", "parent_owner"),
	}
}
