package learn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/learncall"
	"github.com/aephost/aep/ent/learnexperience"
	"github.com/aephost/aep/ent/learnfeedback"
	"github.com/aephost/aep/ent/learnweight"
	"github.com/aephost/aep/ent/predicate"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// page is how many rows one query reads when scanning a table.
const page = 5000

// callFigures accumulates one component's audited calls.
type callFigures struct {
	calls, successes int
	sum              float64
	durations        []float64
	last             time.Time
}

// p95 is the nearest-rank 95th percentile: the smallest duration with at
// least 95 % of the calls at or below it.
func p95(d []float64) float64 {
	if len(d) == 0 {
		return 0
	}
	sort.Float64s(d)
	return d[int(math.Ceil(0.95*float64(len(d))))-1]
}

func (p *Plugin) stats(ctx context.Context, tenant, kind, name string) ([]msg.ComponentStats, error) {
	calls := map[componentKey]*callFigures{}
	preds := []predicate.LearnCall{learncall.Tenant(tenant)}
	if kind != "" {
		preds = append(preds, learncall.Kind(kind))
	}
	if name != "" {
		preds = append(preds, learncall.Name(name))
	}
	for after := 0; ; {
		rows, err := p.db.LearnCall.Query().Where(append(preds, learncall.IDGT(after))...).
			Order(ent.Asc(learncall.FieldID)).Limit(page).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("learn: %w", err)
		}
		for _, r := range rows {
			k := componentKey{r.Kind, r.Name}
			f := calls[k]
			if f == nil {
				f = &callFigures{}
				calls[k] = f
			}
			f.calls++
			if r.Success {
				f.successes++
			}
			f.sum += r.DurationMs
			f.durations = append(f.durations, r.DurationMs)
			if r.Ts.After(f.last) {
				f.last = r.Ts
			}
		}
		if len(rows) < page {
			break
		}
		after = rows[len(rows)-1].ID
	}

	fpreds := []predicate.LearnFeedback{learnfeedback.Tenant(tenant)}
	if kind != "" {
		fpreds = append(fpreds, learnfeedback.Kind(kind))
	}
	if name != "" {
		fpreds = append(fpreds, learnfeedback.Name(name))
	}
	var fb []struct {
		Kind  string  `json:"kind"`
		Name  string  `json:"name"`
		Count int     `json:"count"`
		Mean  float64 `json:"mean"`
	}
	err := p.db.LearnFeedback.Query().Where(fpreds...).GroupBy(learnfeedback.FieldKind, learnfeedback.FieldName).
		Aggregate(ent.As(ent.Count(), "count"), ent.As(ent.Mean(learnfeedback.FieldScore), "mean")).Scan(ctx, &fb)
	if err != nil {
		return nil, fmt.Errorf("learn: %w", err)
	}
	type fbFigures struct {
		count int
		mean  float64
	}
	feedback := map[componentKey]fbFigures{}
	all := map[componentKey]bool{}
	for _, f := range fb {
		k := componentKey{f.Kind, f.Name}
		feedback[k] = fbFigures{f.Count, f.Mean}
		all[k] = true
	}
	for k := range calls {
		all[k] = true
	}
	out := make([]msg.ComponentStats, 0, len(all))
	for _, k := range sortedComponents(all) {
		cs := msg.ComponentStats{Kind: k.kind, Name: k.name}
		if f := calls[k]; f != nil {
			cs.Calls, cs.Successes, cs.Failures = f.calls, f.successes, f.calls-f.successes
			cs.MeanDurationMs = f.sum / float64(f.calls)
			cs.P95DurationMs = p95(f.durations)
			last := wire.Epoch(f.last)
			cs.LastCalled = &last
		}
		if f, ok := feedback[k]; ok {
			cs.Feedbacks = f.count
			mean := f.mean
			cs.MeanScore = &mean
		}
		out = append(out, cs)
	}
	return out, nil
}

// LearnAdapt rebuilds the weights of one context, or of all, from the
// stored feedback, weighting each by 2^(-age/half_life) when a half-life is
// given (docs/learn.md).
func (p *Plugin) LearnAdapt(ctx context.Context, s wire.Scope, req *msg.LearnAdaptReq) (*msg.LearnAdaptResp, error) {
	halfLife := 0.0
	if req.HalfLifeS != nil {
		halfLife = *req.HalfLifeS
	}
	now := time.Now()
	if req.Context != nil {
		if err := checkContext("context", *req.Context); err != nil {
			return nil, err
		}
	}
	tenant := p.tenantOf(s)
	resp := &msg.LearnAdaptResp{Weights: []msg.Weight{}}
	err := p.withTx(ctx, func(tx *ent.Tx) error {
		type acc struct{ pulls, rewards float64 }
		sums := map[weightKey]*acc{}
		var keys []weightKey
		resp.Feedbacks = 0
		fpred := []predicate.LearnFeedback{learnfeedback.Tenant(tenant)}
		wpred := []predicate.LearnWeight{tenantWeights(tenant)}
		if req.Context != nil && *req.Context != "" {
			fpred = append(fpred, learnfeedback.Context(*req.Context))
			wpred = append(wpred, learnweight.Context(storedContext(tenant, *req.Context)))
		} else if req.Context != nil {
			wpred = append(wpred, learnweight.Context(storedContext(tenant, "")))
		}
		for after := 0; ; {
			rows, err := tx.LearnFeedback.Query().Where(append(fpred, learnfeedback.IDGT(after))...).
				Order(ent.Asc(learnfeedback.FieldID)).Limit(page).All(ctx)
			if err != nil {
				return fmt.Errorf("learn: %w", err)
			}
			for _, f := range rows {
				resp.Feedbacks++
				w := 1.0
				if halfLife > 0 {
					w = math.Exp2(-now.Sub(f.CreatedAt).Seconds() / halfLife)
				}
				for _, c := range contextsOf(f.Context) {
					if req.Context != nil && c != *req.Context {
						continue
					}
					k := weightKey{c, f.Kind, f.Name}
					a := sums[k]
					if a == nil {
						a = &acc{}
						sums[k] = a
						keys = append(keys, k)
					}
					a.pulls += w
					a.rewards += w * reward(f.Score)
				}
			}
			if len(rows) < page {
				break
			}
			after = rows[len(rows)-1].ID
		}
		if _, err := tx.LearnWeight.Delete().Where(wpred...).Exec(ctx); err != nil {
			return fmt.Errorf("learn: %w", err)
		}
		resp.Weights = resp.Weights[:0]
		for _, k := range keys {
			a := sums[k]
			if err := addReward(ctx, tx, tenant, k, a.pulls, a.rewards); err != nil {
				return err
			}
			m := arm{Pulls: a.pulls, RewardSum: a.rewards}
			resp.Weights = append(resp.Weights, msg.Weight{Context: k.context, Kind: k.kind, Name: k.name, Pulls: a.pulls, RewardSum: a.rewards, MeanReward: m.mean()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Export records: one JSON object per line (docs/learn.md).
type feedbackLine struct {
	ID            int           `json:"id"`
	Type          string        `json:"type"`
	Score         float64       `json:"score"`
	Component     msg.Component `json:"component"`
	Context       string        `json:"context"`
	CorrelationID string        `json:"correlation_id"`
	CallReqID     string        `json:"call_req_id"`
	Correction    string        `json:"correction,omitempty"`
	Comment       string        `json:"comment,omitempty"`
	Dimension     string        `json:"dimension,omitempty"`
	Source        string        `json:"source"`
	EpisodeID     string        `json:"episode_id,omitempty"`
	SessionID     string        `json:"session_id"`
	TS            float64       `json:"ts"`
}

type experienceLine struct {
	ID         int             `json:"id"`
	BatchID    string          `json:"batch_id"`
	EpisodeID  string          `json:"episode_id"`
	Step       int             `json:"step"`
	State      json.RawMessage `json:"state"`
	Action     json.RawMessage `json:"action"`
	Reward     float64         `json:"reward"`
	NextState  json.RawMessage `json:"next_state"`
	Terminated bool            `json:"terminated"`
	Truncated  bool            `json:"truncated"`
	Info       json.RawMessage `json:"info,omitempty"`
	EnvName    string          `json:"env_name,omitempty"`
	SessionID  string          `json:"session_id"`
	TS         float64         `json:"ts"`
}

// exportPage appends up to limit records after id `after` as JSON lines and
// returns the last id written and whether more follow.
// Only the tenant's records are read; a non-empty session selects only the
// records that session wrote.
func (p *Plugin) exportPage(ctx context.Context, what, tenant, session, episode string, after, limit int, buf []byte) ([]byte, int, int, bool, error) {
	var lines []any
	var last int
	var more bool
	switch what {
	case "feedback":
		q := p.db.LearnFeedback.Query().Where(learnfeedback.Tenant(tenant), learnfeedback.IDGT(after))
		if episode != "" {
			q = q.Where(learnfeedback.EpisodeID(episode))
		}
		if session != "" {
			q = q.Where(learnfeedback.SessionID(session))
		}
		rows, err := q.Order(ent.Asc(learnfeedback.FieldID)).Limit(limit + 1).All(ctx)
		if err != nil {
			return buf, 0, after, false, fmt.Errorf("learn: %w", err)
		}
		if more = len(rows) > limit; more {
			rows = rows[:limit]
		}
		for _, f := range rows {
			lines = append(lines, feedbackLine{ID: f.ID, Type: f.Type, Score: f.Score, Component: msg.Component{Kind: f.Kind, Name: f.Name},
				Context: f.Context, CorrelationID: f.CorrelationID, CallReqID: f.CallReqID, Correction: f.Correction, Comment: f.Comment,
				Dimension: f.Dimension, Source: f.Source, EpisodeID: f.EpisodeID, SessionID: f.SessionID, TS: wire.Epoch(f.CreatedAt)})
			last = f.ID
		}
	default:
		q := p.db.LearnExperience.Query().Where(learnexperience.Tenant(tenant), learnexperience.IDGT(after))
		if episode != "" {
			q = q.Where(learnexperience.EpisodeID(episode))
		}
		if session != "" {
			q = q.Where(learnexperience.SessionID(session))
		}
		rows, err := q.Order(ent.Asc(learnexperience.FieldID)).Limit(limit + 1).All(ctx)
		if err != nil {
			return buf, 0, after, false, fmt.Errorf("learn: %w", err)
		}
		if more = len(rows) > limit; more {
			rows = rows[:limit]
		}
		for _, e := range rows {
			lines = append(lines, experienceLine{ID: e.ID, BatchID: e.BatchID, EpisodeID: e.EpisodeID, Step: e.Step, State: e.State,
				Action: e.Action, Reward: e.Reward, NextState: e.NextState, Terminated: e.Terminated, Truncated: e.Truncated,
				Info: e.Info, EnvName: e.EnvName, SessionID: e.SessionID, TS: wire.Epoch(e.CreatedAt)})
			last = e.ID
		}
	}
	for _, l := range lines {
		b, err := json.Marshal(l)
		if err != nil {
			return buf, 0, after, false, fmt.Errorf("learn: export: %w", err)
		}
		buf = append(append(buf, b...), '\n')
	}
	if len(lines) == 0 {
		last = after
	}
	return buf, len(lines), last, more, nil
}

// errExportNoDataDir refuses to_file on a host without a data directory: a
// setting of the host, which the agent can work around with pages.
var errExportNoDataDir = wire.Reason("data_dir_unavailable", errors.New("learn: export to a file needs the host's data directory; export in pages instead"))

// LearnExport returns one page of JSON Lines, or writes every matching
// record to a file under the plugin's data directory.
func (p *Plugin) LearnExport(ctx context.Context, s wire.Scope, req *msg.LearnExportReq) (*msg.LearnExportResp, error) {
	what := string(req.What)
	after := 0
	if c := str(req.Cursor); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			// A cursor the plugin never issued names no position: not
			// found, a condition of state (docs/DECISIONS.md, Errors of state).
			return nil, fmt.Errorf("%w: cursor %q is not a cursor of learn/export", wire.ErrNotFound, c)
		}
		after = n
	}
	limit := 1000
	if req.Limit != nil {
		limit = *req.Limit
	}
	// Records are the session's own unless the operator shares its
	// tenant's; never another tenant's.
	tenant := p.tenantOf(s)
	reader := s.SessionID()
	if p.ExportScope == ExportHost {
		reader = ""
	}
	resp := &msg.LearnExportResp{What: what}
	if !req.ToFile {
		buf, n, last, more, err := p.exportPage(ctx, what, tenant, reader, str(req.EpisodeID), after, limit, nil)
		if err != nil {
			return nil, err
		}
		text := string(buf)
		resp.Count, resp.Jsonl = n, &text
		if more {
			next := strconv.Itoa(last)
			resp.NextCursor = &next
		}
		return resp, nil
	}
	if p.dataDir == "" {
		return nil, errExportNoDataDir
	}
	dir := filepath.Join(p.dataDir, "export")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("learn: export: %w", err)
	}
	name := fmt.Sprintf("%s-%s-%s.jsonl", what, time.Now().UTC().Format("20060102T150405Z"), newID()[:8])
	tmp, err := os.CreateTemp(dir, ".export-*")
	if err != nil {
		return nil, fmt.Errorf("learn: export: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	var buf []byte
	for more := true; more; {
		var n int
		buf, n, after, more, err = p.exportPage(ctx, what, tenant, reader, str(req.EpisodeID), after, page, buf[:0])
		if err == nil {
			_, err = tmp.Write(buf)
		}
		if err != nil {
			tmp.Close()
			return nil, fmt.Errorf("learn: export: %w", err)
		}
		resp.Count += n
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("learn: export: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return nil, fmt.Errorf("learn: export: %w", err)
	}
	rel := filepath.ToSlash(filepath.Join("export", name))
	resp.Path = &rel
	return resp, nil
}
