package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// SkillRegistration is a skill a session registered at run time
// (skill/register; docs/DECISIONS.md, Capability gaps users hit): its
// manifest and files as sent, kept while the session lives.
type SkillRegistration struct {
	ent.Schema
}

// Fields of the SkillRegistration.
func (SkillRegistration) Fields() []ent.Field {
	return []ent.Field{
		field.String("session_id").NotEmpty().Immutable(),
		field.String("name").NotEmpty().Immutable(),
		field.String("version").NotEmpty().Immutable(),
		// Scope is "session" or "subagents".
		field.String("scope").NotEmpty().Immutable(),
		// Manifest is the skill.json sent; Files the files as sent (JSON).
		field.Bytes("manifest").Immutable(),
		field.Bytes("files").Immutable(),
		field.Time("created_at").Default(time.Now).Immutable(),
	}
}

// Indexes of the SkillRegistration.
func (SkillRegistration) Indexes() []ent.Index {
	return []ent.Index{index.Fields("session_id", "name", "version").Unique()}
}
