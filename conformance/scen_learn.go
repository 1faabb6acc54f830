package conformance

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
)

// learn: feedback, experience and their use (schemas/learn.json). A
// ranking's order is the strategy's, not judged; that every candidate is
// ranked once is.
func (k *kit) learn(ctx context.Context) error {
	if !k.offers("learn", CheckLearnFeedback, CheckLearnExperience, CheckLearnRank) {
		return nil
	}
	s := k.sessionFor(ctx, CheckLearnFeedback, "learn", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	c := CheckLearnFeedback
	learnCtx := k.name("context")
	rated := map[string]any{"kind": "tool", "name": k.name("rated")}
	untried := map[string]any{"kind": "tool", "name": k.name("untried")}
	m := s.call(ctx, "learn/feedback/req", map[string]any{"feedbacks": []any{
		map[string]any{"type": "POSITIVE", "component": rated, "context": learnCtx, "comment": k.name("comment")},
		map[string]any{"type": "NEGATIVE", "score": -0.5, "component": rated, "context": learnCtx},
	}})
	if k.want(c, m, "learn/feedback/resp", "learn/feedback of two ratings") {
		n, _ := num(m.body, "recorded")
		k.expect(c, n == 2 && len(arr(m.body, "ids")) == 2, "learn/feedback of two ratings: recorded %v with %d ids", n, len(arr(m.body, "ids")))
		found := false
		for _, w := range arr(m.body, "weights") {
			if str(w, "name") == rated["name"] && str(w, "kind") == "tool" && str(w, "context") == learnCtx {
				found = true
				pulls, _ := num(w, "pulls")
				k.expect(c, pulls >= 2, "the rated component's weight counts %v pulls after two ratings", pulls)
			}
		}
		k.expect(c, found, "learn/feedback's weights lack the rated component in its context: %s", m)
	}
	k.wantError(c, s.call(ctx, "learn/feedback/req", map[string]any{"feedbacks": []any{map[string]any{"type": "CORRECTIVE", "component": rated}}}), "a CORRECTIVE feedback without its correction", "schema_violation")
	m = s.call(ctx, "learn/export/req", map[string]any{"what": "feedback"})
	if k.want(c, m, "learn/export/resp", "learn/export of feedback") {
		n, _ := num(m.body, "count")
		lines := strings.Split(strings.TrimSuffix(str(m.body, "jsonl"), "\n"), "\n")
		if str(m.body, "jsonl") == "" {
			lines = nil
		}
		k.expect(c, n >= 2 && len(lines) == int(n), "learn/export of feedback: count %v, %d lines", n, len(lines))
		for _, l := range lines {
			k.expect(c, json.Valid([]byte(l)), "learn/export: a line is not JSON: %q", clip([]byte(l)))
		}
		if str(m.body, "next_cursor") == "" {
			k.expect(c, strings.Contains(str(m.body, "jsonl"), k.name("comment")), "learn/export of feedback (one page) lacks the feedback just given")
		}
	}

	e := CheckLearnExperience
	m = s.call(ctx, "learn/experience/req", map[string]any{"env_name": k.name("env"), "experiences": []any{
		map[string]any{"state": 0.0, "action": 1.0, "reward": 0.5, "next_state": 1.0, "episode_id": k.name("episode"), "step": 0.0},
		map[string]any{"state": 1.0, "action": 0.0, "reward": 1.0, "next_state": 2.0, "episode_id": k.name("episode"), "step": 1.0, "terminated": true},
	}})
	if k.want(e, m, "learn/experience/resp", "learn/experience of two transitions") {
		n, _ := num(m.body, "stored")
		k.expect(e, n == 2 && str(m.body, "batch_id") != "", "learn/experience of two transitions: stored %v, batch_id %q", n, str(m.body, "batch_id"))
	}

	r := CheckLearnRank
	m = s.call(ctx, "learn/rank/req", map[string]any{"context": learnCtx, "candidates": []any{rated, untried}})
	if k.want(r, m, "learn/rank/resp", "learn/rank of two candidates") {
		var ranks []int
		seen := map[string]bool{}
		for _, x := range arr(m.body, "ranked") {
			rank, _ := num(x, "rank")
			ranks = append(ranks, int(rank))
			seen[str(x, "name")] = true
			if str(x, "name") == untried["name"] {
				u, _ := boolean(x, "untried")
				k.expect(r, u, "learn/rank: the never rated candidate is not untried")
			}
		}
		sort.Ints(ranks)
		k.expect(r, equal(ranks, []int{1, 2}) && len(seen) == 2, "learn/rank of two candidates: ranks %v for %v, want each once, ranked 1 and 2", ranks, seen)
	}
	m = s.call(ctx, "learn/adapt/req", map[string]any{"context": learnCtx})
	if k.want(r, m, "learn/adapt/resp", "learn/adapt") {
		n, _ := num(m.body, "feedbacks")
		k.expect(r, n >= 2, "learn/adapt of the context replayed %v feedbacks, two were given", n)
	}
	m = s.call(ctx, "learn/stats/req", map[string]any{"kind": "tool", "name": rated["name"]})
	if k.want(r, m, "learn/stats/resp", "learn/stats of the rated component") {
		found := false
		for _, x := range arr(m.body, "components") {
			if str(x, "name") == rated["name"] {
				found = true
				n, _ := num(x, "feedbacks")
				k.expect(r, n >= 2, "learn/stats counts %v feedbacks of the rated component, two were given", n)
			}
		}
		k.expect(r, found, "learn/stats lacks the rated component: %s", m)
	}
	return nil
}
