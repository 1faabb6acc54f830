// Package learn is the learn capability (spec §1 table: feedback, experience
// storage, adaptation): it records feedback on components and RL
// transitions, keeps bandit preference weights per context that rank which
// component to try first, reports per-component stats joined from the
// kernel's audit stream, and exports its records as JSON Lines. Every record
// lives in the host's shared store (server.PluginEnv.Store), so the host
// keeps what it learned across restarts. docs/learn.md documents the
// adaptation strategy.
package learn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"sort"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/learncall"
	"github.com/aephost/aep/ent/learnweight"
	"github.com/aephost/aep/ent/predicate"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Values of [Plugin.ExportScope].
const (
	ExportSession = "session"
	ExportHost    = "host"
)

// ModuleID is the module of the built-in learn plugin.
const ModuleID = "aep.learn.builtin"

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module ModuleID, the learn capability,
// named learn.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: ModuleID, Capability: "learn", DefaultName: "learn.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// Plugin serves the learn namespace. Its exported fields are its settings
// (the `config` of its plugin entry, decoded strictly).
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/learn.json, docs/config.md).
	Settings `yaml:",inline"`

	db      *ent.Client
	host    *server.Host
	log     *slog.Logger
	dataDir string
	in      *ingest
	unsub   func()
}

// Provision opens the plugin's records in the host's store and subscribes
// to the audit stream for call stats.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	if env.Store == nil {
		return errors.New("learn needs the host's store (server.WithStore or the store section of the config)")
	}
	p.db = env.Store.Client
	p.log = env.Logger
	p.dataDir = env.DataDir
	p.host = env.Host
	p.in = newIngest(p.db, p.log)
	if env.Host != nil {
		p.unsub = env.Host.SubscribeAudit(p.in.record)
	}
	return nil
}

// Validate checks the settings.
func (p *Plugin) Validate() error {
	if p.Exploration != nil && (*p.Exploration < 0 || math.IsNaN(*p.Exploration)) {
		return errors.New("exploration must be at least 0")
	}
	switch p.ExportScope {
	case "", ExportSession, ExportHost:
	default:
		return fmt.Errorf("export_scope %q: want %q or %q", p.ExportScope, ExportSession, ExportHost)
	}
	return nil
}

// Cleanup unsubscribes and stores the calls still queued.
func (p *Plugin) Cleanup() error {
	if p.unsub != nil {
		p.unsub()
	}
	if p.in != nil {
		p.in.close()
		if n := p.in.dropped.Load(); n > 0 {
			p.log.Warn("learn: audited calls dropped because the queue was full", "dropped", n)
		}
	}
	return nil
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func newID() string { return wire.RandomHex(12) }

// tenantOf is the storage key of the requesting session's tenant
// (server.StorageTenant): every record the session writes carries it and
// every read is kept to it, so no tenant sees another's learning.
func (p *Plugin) tenantOf(s wire.Scope) string {
	if p.host == nil {
		return ""
	}
	return p.host.TenantKey(s.SessionID())
}

// tenantPrefix starts the stored context of every weight of a tenant but
// the default one; no context name can hold it (checkContext).
const tenantPrefix = "\x1ft:"

// storedContext is a weight's context column: the context for the default
// tenant, whose weights predate tenants, and behind the tenant's prefix
// for any other.
func storedContext(tenant, context string) string {
	if tenant == "" {
		return context
	}
	return tenantPrefix + tenant + "\x1f" + context
}

// tenantWeights selects every weight of a tenant.
func tenantWeights(tenant string) predicate.LearnWeight {
	if tenant == "" {
		return learnweight.Not(learnweight.ContextHasPrefix(tenantPrefix))
	}
	return learnweight.ContextHasPrefix(tenantPrefix + tenant + "\x1f")
}

// checkContext refuses a context name with control characters, which
// would reach into the stored contexts of other tenants.
func checkContext(field, c string) error {
	for _, r := range c {
		if r < 0x20 || r == 0x7f {
			return &wire.FieldError{Field: field, Reason: "must not hold control characters"}
		}
	}
	return nil
}

// withTx runs f in a transaction, retrying when a concurrent writer created
// the same weight row first (PostgreSQL; SQLite serialises writers).
func (p *Plugin) withTx(ctx context.Context, f func(tx *ent.Tx) error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var tx *ent.Tx
		tx, err = p.db.Tx(ctx)
		if err != nil {
			return fmt.Errorf("learn: %w", err)
		}
		if err = f(tx); err != nil {
			_ = tx.Rollback()
			if ent.IsConstraintError(err) {
				continue
			}
			return err
		}
		if err = tx.Commit(); err == nil || !ent.IsConstraintError(err) {
			return err
		}
	}
	return err
}

// LearnFeedback records feedbacks and updates the rated components' weights
// in one transaction.
func (p *Plugin) LearnFeedback(ctx context.Context, s wire.Scope, req *msg.LearnFeedbackReq) (*msg.LearnFeedbackResp, error) {
	// Calls the subscriber has seen are stored first, so a correlation_id
	// can name a call answered just before.
	if err := p.in.flush(ctx); err != nil {
		return nil, err
	}
	tenant := p.tenantOf(s)
	for i, f := range req.Feedbacks {
		if err := checkContext(fmt.Sprintf("feedbacks[%d].context", i), str(f.Context)); err != nil {
			return nil, err
		}
	}
	resp := &msg.LearnFeedbackResp{Ids: []int{}, Weights: []msg.Weight{}}
	err := p.withTx(ctx, func(tx *ent.Tx) error {
		resp.Ids, resp.Linked, resp.Weights = resp.Ids[:0], 0, resp.Weights[:0]
		touched := map[weightKey]bool{}
		var order []weightKey
		for i, f := range req.Feedbacks {
			var call *ent.LearnCall
			if c := str(f.CorrelationID); c != "" {
				var err error
				call, err = tx.LearnCall.Query().
					Where(learncall.Tenant(tenant), learncall.Or(learncall.CorrelationID(c), learncall.ReqID(c))).
					Order(ent.Desc(learncall.FieldTs)).First(ctx)
				if err != nil && !ent.IsNotFound(err) {
					return fmt.Errorf("learn: %w", err)
				}
			}
			var kind, name string
			switch {
			case f.Component != nil:
				kind, name = f.Component.Kind, f.Component.Name
			case call != nil:
				kind, name = call.Kind, call.Name
			case f.CorrelationID == nil:
				// The schema's anyOf: a decoded request always has one.
				return &wire.FieldError{Field: fmt.Sprintf("feedbacks[%d].component", i), Reason: "required unless correlation_id names an audited call"}
			default:
				// A correlation_id that names no audited call of the
				// tenant: a condition of state (docs/DECISIONS.md, Errors
				// of state), the same answer whoever's call it might be.
				return fmt.Errorf("%w: feedbacks[%d].correlation_id %q names no audited call", wire.ErrNotFound, i, *f.CorrelationID)
			}
			score := defaultScore[string(f.Type)]
			if f.Score != nil {
				score = *f.Score
			}
			source := "human"
			if f.Source != nil {
				source = string(*f.Source)
			}
			c := tx.LearnFeedback.Create().SetType(string(f.Type)).SetScore(score).SetKind(kind).SetName(name).
				SetContext(str(f.Context)).SetCorrelationID(str(f.CorrelationID)).SetCorrection(str(f.Correction)).
				SetComment(str(f.Comment)).SetDimension(str(f.Dimension)).SetSource(source).
				SetEpisodeID(str(f.EpisodeID)).SetSessionID(s.SessionID()).SetTenant(tenant)
			if call != nil {
				c.SetCallReqID(call.ReqID)
				resp.Linked++
			}
			fb, err := c.Save(ctx)
			if err != nil {
				return fmt.Errorf("learn: %w", err)
			}
			resp.Ids = append(resp.Ids, fb.ID)
			for _, ctxName := range contextsOf(str(f.Context)) {
				k := weightKey{ctxName, kind, name}
				if err := addReward(ctx, tx, tenant, k, 1, reward(score)); err != nil {
					return err
				}
				if !touched[k] {
					touched[k] = true
					order = append(order, k)
				}
			}
		}
		for _, k := range order {
			w, err := tx.LearnWeight.Query().Where(learnweight.Context(storedContext(tenant, k.context)), learnweight.Kind(k.kind), learnweight.Name(k.name)).Only(ctx)
			if err != nil {
				return fmt.Errorf("learn: %w", err)
			}
			resp.Weights = append(resp.Weights, weightOf(k.context, w))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	resp.Recorded = len(resp.Ids)
	return resp, nil
}

// contextsOf lists the contexts a feedback updates: the global one always,
// and its own when it names one (docs/learn.md).
func contextsOf(c string) []string {
	if c == "" {
		return []string{""}
	}
	return []string{"", c}
}

type weightKey struct{ context, kind, name string }

// addReward adds pulls and reward to a tenant's weight row, creating it if
// needed.
func addReward(ctx context.Context, tx *ent.Tx, tenant string, k weightKey, pulls, rew float64) error {
	stored := storedContext(tenant, k.context)
	n, err := tx.LearnWeight.Update().
		Where(learnweight.Context(stored), learnweight.Kind(k.kind), learnweight.Name(k.name)).
		AddPulls(pulls).AddRewardSum(rew).Save(ctx)
	if err != nil {
		return fmt.Errorf("learn: %w", err)
	}
	if n == 0 {
		if err := tx.LearnWeight.Create().SetContext(stored).SetKind(k.kind).SetName(k.name).SetPulls(pulls).SetRewardSum(rew).Exec(ctx); err != nil {
			return fmt.Errorf("learn: %w", err)
		}
	}
	return nil
}

// weightOf is a stored weight as the wire shows it, under its context's
// name (the stored column may carry the tenant's prefix).
func weightOf(context string, w *ent.LearnWeight) msg.Weight {
	a := arm{Pulls: w.Pulls, RewardSum: w.RewardSum}
	return msg.Weight{Context: context, Kind: w.Kind, Name: w.Name, Pulls: w.Pulls, RewardSum: w.RewardSum, MeanReward: a.mean()}
}

// LearnExperience stores a batch of transitions in one transaction.
func (p *Plugin) LearnExperience(ctx context.Context, s wire.Scope, req *msg.LearnExperienceReq) (*msg.LearnExperienceResp, error) {
	batch := "b-" + newID()
	tenant := p.tenantOf(s)
	err := p.withTx(ctx, func(tx *ent.Tx) error {
		const chunk = 500 // stays under SQLite's bound-variable limit
		for i := 0; i < len(req.Experiences); i += chunk {
			part := req.Experiences[i:min(i+chunk, len(req.Experiences))]
			bulk := make([]*ent.LearnExperienceCreate, len(part))
			for j, e := range part {
				c := tx.LearnExperience.Create().SetBatchID(batch).SetEpisodeID(e.EpisodeID).SetStep(e.Step).
					SetState(e.State).SetAction(e.Action).SetReward(e.Reward).SetNextState(e.NextState).
					SetTerminated(e.Terminated).SetTruncated(e.Truncated).SetEnvName(str(req.EnvName)).SetSessionID(s.SessionID()).SetTenant(tenant)
				if e.Info != nil {
					c.SetInfo(*e.Info)
				}
				bulk[j] = c
			}
			if err := tx.LearnExperience.CreateBulk(bulk...).Exec(ctx); err != nil {
				return fmt.Errorf("learn: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &msg.LearnExperienceResp{Stored: len(req.Experiences), BatchID: batch}, nil
}

// LearnRank orders the candidates of a context by the requested strategy.
func (p *Plugin) LearnRank(ctx context.Context, s wire.Scope, req *msg.LearnRankReq) (*msg.LearnRankResp, error) {
	ctxName := str(req.Context)
	if err := checkContext("context", ctxName); err != nil {
		return nil, err
	}
	q := p.db.LearnWeight.Query().Where(learnweight.Context(storedContext(p.tenantOf(s), ctxName)))
	if k := str(req.Kind); k != "" && len(req.Candidates) == 0 {
		q = q.Where(learnweight.Kind(k))
	}
	ws, err := q.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("learn: %w", err)
	}
	known := map[weightKey]*ent.LearnWeight{}
	for _, w := range ws {
		known[weightKey{ctxName, w.Kind, w.Name}] = w
	}
	var arms []arm
	if len(req.Candidates) > 0 {
		seen := map[weightKey]bool{}
		for _, c := range req.Candidates {
			k := weightKey{ctxName, c.Kind, c.Name}
			if seen[k] {
				continue
			}
			seen[k] = true
			a := arm{Kind: c.Kind, Name: c.Name}
			if w := known[k]; w != nil {
				a.Pulls, a.RewardSum = w.Pulls, w.RewardSum
			}
			arms = append(arms, a)
		}
	} else {
		for _, w := range ws {
			arms = append(arms, arm{Kind: w.Kind, Name: w.Name, Pulls: w.Pulls, RewardSum: w.RewardSum})
		}
	}
	c := DefaultExploration
	if p.Exploration != nil {
		c = *p.Exploration
	}
	if req.Exploration != nil {
		c = *req.Exploration
	}
	var seed uint64
	if req.Seed != nil {
		seed = uint64(*req.Seed)
	} else {
		seed = mrand.Uint64()
	}
	strategy := string(req.Strategy)
	out := rank(strategy, arms, c, mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
	resp := &msg.LearnRankResp{Context: ctxName, Strategy: strategy, Ranked: make([]msg.RankedComponent, len(out))}
	for i, r := range out {
		rc := msg.RankedComponent{Kind: r.Kind, Name: r.Name, Rank: i + 1, Pulls: r.Pulls, MeanReward: r.mean(), Untried: r.Untried}
		if !(r.Untried && strategy != StrategyThompson) {
			score := r.Score
			rc.Score = &score
		}
		resp.Ranked[i] = rc
	}
	return resp, nil
}

// LearnStats joins the audited calls with the feedback per component.
func (p *Plugin) LearnStats(ctx context.Context, s wire.Scope, req *msg.LearnStatsReq) (*msg.LearnStatsResp, error) {
	if err := p.in.flush(ctx); err != nil {
		return nil, err
	}
	st, err := p.stats(ctx, p.tenantOf(s), str(req.Kind), str(req.Name))
	if err != nil {
		return nil, err
	}
	return &msg.LearnStatsResp{Components: st}, nil
}

// componentKey names a component in stats.
type componentKey struct{ kind, name string }

func sortedComponents[V any](m map[componentKey]V) []componentKey {
	keys := make([]componentKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].kind != keys[j].kind {
			return keys[i].kind < keys[j].kind
		}
		return keys[i].name < keys[j].name
	})
	return keys
}

var (
	_ msg.LearnHandler    = (*Plugin)(nil)
	_ server.Provisioner  = (*Plugin)(nil)
	_ server.Validator    = (*Plugin)(nil)
	_ server.CleanerUpper = (*Plugin)(nil)
)
