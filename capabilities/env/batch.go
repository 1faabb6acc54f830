package env

import (
	"context"
	"fmt"
	"sort"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// EnvStepBatch answers env/step_batch/req: one step of many episodes, with
// the autoreset modes of Gymnasium's vector environments (schemas/env.json).
// Every episode is checked before any steps, so a refused batch changes
// nothing; an environment error part-way stops the batch, and the episodes
// stepped before it keep their step.
func (p *Plugin) EnvStepBatch(ctx context.Context, s wire.Scope, req *msg.EnvStepBatchReq) (*msg.EnvStepBatchResp, error) {
	n := len(req.EpisodeIds)
	if len(req.Actions) != n {
		return nil, &wire.FieldError{Field: "actions", Reason: fmt.Sprintf("has %d actions for %d episode_ids", len(req.Actions), n)}
	}
	eps := make([]*episode, n)
	seen := make(map[string]struct{}, n)
	for i, id := range req.EpisodeIds {
		if _, dup := seen[id]; dup {
			return nil, &wire.FieldError{Field: fmt.Sprintf("episode_ids[%d]", i), Reason: fmt.Sprintf("episode %q appears twice", id)}
		}
		seen[id] = struct{}{}
		ep, err := p.lookup(s.SessionID(), id)
		if err != nil {
			return nil, err
		}
		eps[i] = ep
	}
	// Lock in id order so that concurrent batches cannot deadlock.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return eps[order[a]].id < eps[order[b]].id })
	for _, i := range order {
		eps[i].mu.Lock()
	}
	defer func() {
		for _, i := range order {
			eps[i].mu.Unlock()
		}
	}()
	mode := req.AutoresetMode
	if mode == "" {
		mode = msg.EnvStepBatchReqAutoresetModeNextStep
	}
	for _, ep := range eps {
		if err := ep.alive(); err != nil {
			return nil, err
		}
		if mode == msg.EnvStepBatchReqAutoresetModeDisabled && ep.status != statusRunning {
			return nil, fmt.Errorf("episode %q is %s and autoreset is disabled: %w", ep.id, ep.status, ErrFinished)
		}
	}
	sid := s.SessionID()
	out := &msg.EnvStepBatchResp{Results: make([]msg.BatchStep, n)}
	for i, ep := range eps {
		r := &out.Results[i]
		r.EpisodeID = ep.id
		if ep.status != statusRunning {
			// next_step: the episode that finished last step is reset now and
			// its action ignored. same_step never leaves one finished, except
			// one finished outside a same_step batch: it is reset, then stepped.
			o, err := p.resetLocked(ctx, sid, ep, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("episode_ids[%d]: autoreset: %w", i, err)
			}
			if mode == msg.EnvStepBatchReqAutoresetModeNextStep {
				yes := true
				r.Observation, r.Info, r.Reset = o.Observation, infoOf(o.Info), &yes
				continue
			}
		}
		st, err := p.stepLocked(ctx, sid, ep, req.Actions[i])
		if err != nil {
			return nil, fmt.Errorf("episode_ids[%d]: %w", i, err)
		}
		r.Observation, r.Reward, r.Terminated, r.Truncated, r.Info, r.Step =
			st.Observation, st.Reward, st.Terminated, st.Truncated, infoOf(st.Info), ep.step
		if mode == msg.EnvStepBatchReqAutoresetModeSameStep && (st.Terminated || st.Truncated) {
			o, err := p.resetLocked(ctx, sid, ep, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("episode_ids[%d]: autoreset: %w", i, err)
			}
			yes := true
			r.FinalObservation, r.FinalInfo = raw(st.Observation), infoPtr(st.Info)
			r.Observation, r.Info, r.Reset, r.Step = o.Observation, infoOf(o.Info), &yes, 0
		}
	}
	return out, nil
}
