package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// memoryFields are the columns both persistent memory tiers share (SPEC
// 2.11; issue 5). Times are Unix nanoseconds so ordering and TTL checks are
// integer comparisons in SQL on every dialect; expires_at 0 means never.
// Body is the text the full-text index reads (a string content's text, or
// the JSON of other content); tag_set holds the tags between 0x1f bytes so a
// tag filter is one instr() test.
func memoryFields() []ent.Field {
	return []ent.Field{
		field.String("namespace").NotEmpty(),
		field.String("agent").Default(""),
		field.String("key").NotEmpty(),
		field.Bytes("content"),
		field.Text("body"),
		field.String("tags").Default("[]"),
		field.String("tag_set").Default(""),
		field.String("source").Default(""),
		field.Bytes("metadata").Optional().Nillable(),
		field.Int64("created_at"),
		field.Int64("updated_at"),
		field.Int64("expires_at").Default(0),
		field.Int64("size").Default(0),
	}
}

// MemorySemantic is one entry of the semantic tier: key-value knowledge with
// tags and TTL, upserted by key within its namespace and agent, searched by
// an FTS5 table the memory capability creates beside it on SQLite.
type MemorySemantic struct {
	ent.Schema
}

// Annotations of the MemorySemantic.
func (MemorySemantic) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "memory_semantic"}}
}

// Fields of the MemorySemantic.
func (MemorySemantic) Fields() []ent.Field { return memoryFields() }

// Indexes of the MemorySemantic.
func (MemorySemantic) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "agent", "key").Unique(),
		index.Fields("expires_at"),
	}
}

// MemoryEpisodic is one event of the episodic tier: an append-ordered,
// timestamped log per namespace and agent; the id is the append order.
type MemoryEpisodic struct {
	ent.Schema
}

// Annotations of the MemoryEpisodic.
func (MemoryEpisodic) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "memory_episodic"}}
}

// Fields of the MemoryEpisodic.
func (MemoryEpisodic) Fields() []ent.Field { return memoryFields() }

// Indexes of the MemoryEpisodic.
func (MemoryEpisodic) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "agent", "created_at"),
		index.Fields("namespace", "agent", "key"),
		index.Fields("expires_at"),
	}
}
