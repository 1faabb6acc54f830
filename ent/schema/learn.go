package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// The learn capability's records (schemas/learn.json, docs/learn.md). They
// are host data, not session state: they outlive sessions and restarts so
// that what one episode taught the host serves the next.

// LearnFeedback is one rating of a component (SPEC 2.11 feedback types).
type LearnFeedback struct {
	ent.Schema
}

// Fields of the LearnFeedback.
func (LearnFeedback) Fields() []ent.Field {
	return []ent.Field{
		field.String("type").NotEmpty().Immutable(), // POSITIVE|NEGATIVE|NEUTRAL|CORRECTIVE
		// Score is the rating in [-1, 1], the type's default when none was given.
		field.Float("score").Immutable(),
		field.String("kind").NotEmpty().Immutable(),
		field.String("name").NotEmpty().Immutable(),
		field.String("context").Default("").Immutable(),
		field.String("correlation_id").Default("").Immutable(),
		// ReqID is the envelope id of the audited call correlation_id matched, if any.
		field.String("call_req_id").Default("").Immutable(),
		field.Text("correction").Default("").Immutable(),
		field.Text("comment").Default("").Immutable(),
		field.String("dimension").Default("").Immutable(),
		field.String("source").Default("human").Immutable(),
		field.String("episode_id").Default("").Immutable(),
		field.String("session_id").Default("").Immutable(),
		// Tenant is the writing session's tenant (server.StorageTenant: ""
		// for the default one); every read is kept to the reader's.
		field.String("tenant").Default("").Immutable(),
		field.Time("created_at").Default(time.Now).Immutable(),
	}
}

// Indexes of the LearnFeedback.
func (LearnFeedback) Indexes() []ent.Index {
	return []ent.Index{index.Fields("kind", "name"), index.Fields("context"), index.Fields("episode_id"), index.Fields("tenant")}
}

// LearnExperience is one RL transition, stored in batches.
type LearnExperience struct {
	ent.Schema
}

// Fields of the LearnExperience.
func (LearnExperience) Fields() []ent.Field {
	return []ent.Field{
		field.String("batch_id").NotEmpty().Immutable(),
		field.String("episode_id").NotEmpty().Immutable(),
		field.Int("step").NonNegative().Immutable(),
		// State, action, next state and info are the agent's raw JSON.
		field.Bytes("state").Immutable(),
		field.Bytes("action").Immutable(),
		field.Float("reward").Immutable(),
		field.Bytes("next_state").Immutable(),
		field.Bool("terminated").Default(false).Immutable(),
		field.Bool("truncated").Default(false).Immutable(),
		field.Bytes("info").Optional().Immutable(),
		field.String("env_name").Default("").Immutable(),
		field.String("session_id").Default("").Immutable(),
		// Tenant is the writing session's tenant (server.StorageTenant: ""
		// for the default one); every read is kept to the reader's.
		field.String("tenant").Default("").Immutable(),
		field.Time("created_at").Default(time.Now).Immutable(),
	}
}

// Indexes of the LearnExperience.
func (LearnExperience) Indexes() []ent.Index {
	return []ent.Index{index.Fields("episode_id", "step"), index.Fields("batch_id"), index.Fields("tenant")}
}

// LearnWeight is the preference weight of one component in one context:
// the bandit statistics that learn/rank reads (docs/learn.md).
type LearnWeight struct {
	ent.Schema
}

// Fields of the LearnWeight.
func (LearnWeight) Fields() []ent.Field {
	return []ent.Field{
		// Context is the context's name, behind its tenant's prefix for any
		// tenant but the default one (capabilities/learn storedContext):
		// weights are the tenant's, and the unique index of hosts from
		// before tenants stays as it was.
		field.String("context").Default(""),
		field.String("kind").NotEmpty(),
		field.String("name").NotEmpty(),
		// Pulls counts feedbacks; it is fractional after a rebuild with a half-life.
		field.Float("pulls").Default(0),
		// RewardSum adds up rewards in [0, 1].
		field.Float("reward_sum").Default(0),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now),
	}
}

// Indexes of the LearnWeight.
func (LearnWeight) Indexes() []ent.Index {
	return []ent.Index{index.Fields("context", "kind", "name").Unique()}
}

// LearnCall is one audited call of a component, taken from the kernel's
// audit stream, so stats survive restarts without re-reading audit files.
type LearnCall struct {
	ent.Schema
}

// Fields of the LearnCall.
func (LearnCall) Fields() []ent.Field {
	return []ent.Field{
		field.Time("ts").Immutable(),
		field.String("session_id").Default("").Immutable(),
		field.String("req_id").Default("").Immutable(),
		field.String("correlation_id").Default("").Immutable(),
		field.String("type").Immutable(),
		field.String("kind").NotEmpty().Immutable(),
		field.String("name").NotEmpty().Immutable(),
		field.Bool("success").Immutable(),
		field.String("error_code").Default("").Immutable(),
		field.Float("duration_ms").Immutable(),
		// Tenant is the writing session's tenant (server.StorageTenant: ""
		// for the default one); every read is kept to the reader's.
		field.String("tenant").Default("").Immutable(),
	}
}

// Indexes of the LearnCall.
func (LearnCall) Indexes() []ent.Index {
	return []ent.Index{index.Fields("kind", "name"), index.Fields("correlation_id"), index.Fields("req_id"), index.Fields("tenant")}
}
