package env_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/wire"
)

func TestEveryEpisodeMessage(t *testing.T) {
	h := newHost(t, &env.Plugin{})
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			c := aeptest.ConnectWith(t, h, cd.codec, nil, "env")
			ctx := aeptest.Context(t)
			list, err := c.EnvList(ctx, &msg.EnvListReq{})
			if err != nil {
				t.Fatal(err)
			}
			var guess *msg.EnvInfo
			for i := range list.Envs {
				if list.Envs[i].EnvName == env.GuessName {
					guess = &list.Envs[i]
				}
			}
			if guess == nil || !guess.Snapshots || !strings.Contains(string(guess.ActionSpace), "integer") {
				t.Fatalf("env/list: %+v", list.Envs)
			}
			sp, err := c.EnvSpaces(ctx, &msg.EnvSpacesReq{EnvName: aeptest.Ptr(env.GuessName)})
			if err != nil || string(sp.ActionSpace) != string(guess.ActionSpace) {
				t.Fatalf("env/spaces: %+v %v", sp, err)
			}
			r := reset(t, c, env.GuessName, 7, `{"high":1000,"max_steps":50}`)
			if o := decodeObs(t, r.Observation); o.High != 1000 || o.Guesses != 0 || r.EnvName != env.GuessName || !strings.HasPrefix(r.EpisodeID, "ep-") {
				t.Fatalf("env/reset: %+v %s", r, r.Observation)
			}
			// guess gives no info; the reply still has the dict, empty.
			if string(r.Info) != "{}" {
				t.Fatalf("env/reset info %q, want {}", r.Info)
			}
			sp2, err := c.EnvSpaces(ctx, &msg.EnvSpacesReq{EpisodeID: &r.EpisodeID})
			if err != nil || sp2.EnvName != env.GuessName {
				t.Fatalf("env/spaces by episode: %+v %v", sp2, err)
			}
			// Binary search: the episode must terminate with reward 1.
			lo, hi, steps := 0, 1000, 0
			var last *msg.EnvStepResp
			for {
				g := (lo + hi) / 2
				st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage(fmt.Sprint(g))})
				if err != nil {
					t.Fatal(err)
				}
				steps++
				if st.Step != steps || st.EpisodeID != r.EpisodeID {
					t.Fatalf("step counter: %+v", st)
				}
				if len(st.Info) == 0 || st.Info[0] != '{' {
					t.Fatalf("env/step info %q, want an object", st.Info)
				}
				last = st
				o := decodeObs(t, st.Observation)
				if st.Terminated {
					break
				}
				if o.Hint < 0 {
					hi = g
				} else {
					lo = g + 1
				}
			}
			if last.Reward != 1 || last.Truncated || decodeObs(t, last.Observation).Hint != 0 {
				t.Fatalf("final step: %+v", last)
			}
			ob, err := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: r.EpisodeID})
			if err != nil || ob.Status != "terminated" || ob.Step != steps || ob.TotalReward != 1 || string(ob.Observation) != string(last.Observation) {
				t.Fatalf("env/observe: %+v %v", ob, err)
			}
			rd, err := c.EnvRender(ctx, &msg.EnvRenderReq{EpisodeID: r.EpisodeID})
			if err != nil || !strings.Contains(rd.Text, "solved") {
				t.Fatalf("env/render: %+v %v", rd, err)
			}
			// Restarting the open episode keeps its id.
			r2, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName, EpisodeID: &r.EpisodeID})
			if err != nil || r2.EpisodeID != r.EpisodeID {
				t.Fatalf("reset in place: %+v %v", r2, err)
			}
			cl, err := c.EnvClose(ctx, &msg.EnvCloseReq{EpisodeID: r.EpisodeID})
			if err != nil || !cl.Closed {
				t.Fatalf("env/close: %+v %v", cl, err)
			}
			_, err = c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage("1")})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "closed by env/close")
		})
	}
}

func TestSameSeedSameTrajectory(t *testing.T) {
	h := newHost(t, &env.Plugin{})
	c := aeptest.ConnectWith(t, h, directCodec(), nil, "env")
	ctx := aeptest.Context(t)
	play := func(seed int) string {
		r := reset(t, c, env.GuessName, seed, `{"high":1000,"max_steps":30}`)
		var b strings.Builder
		for _, a := range []int{500, 250, 750, 125, 875, 60, 940, 30, 970, 15} {
			st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage(fmt.Sprint(a))})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %v %v;", st.Observation, st.Reward, st.Terminated)
			if st.Terminated {
				break
			}
		}
		return b.String()
	}
	a, b := play(42), play(42)
	if a != b {
		t.Fatalf("same seed, different trajectories:\n%s\n%s", a, b)
	}
	differs := false
	for seed := 1; seed <= 5 && !differs; seed++ {
		differs = play(seed) != a
	}
	if !differs {
		t.Fatal("five other seeds all gave seed 42's trajectory: the seed is ignored")
	}
}

func TestEpisodeErrors(t *testing.T) {
	h := newHost(t, &env.Plugin{Settings: env.Settings{MaxEpisodes: 2}})
	c := aeptest.ConnectWith(t, h, directCodec(), nil, "env")
	ctx := aeptest.Context(t)
	done := reset(t, c, env.GuessName, 1, `{"high":1}`)
	if st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: done.EpisodeID, Action: json.RawMessage("0")}); err != nil || !st.Terminated {
		t.Fatalf("%+v %v", st, err)
	}
	closed := reset(t, c, env.GuessName, 1, "")
	if _, err := c.EnvClose(ctx, &msg.EnvCloseReq{EpisodeID: closed.EpisodeID}); err != nil {
		t.Fatal(err)
	}
	open := reset(t, c, env.GuessName, 1, "")
	tests := []struct {
		name string
		call func() error
		code wire.Code
		sub  string
	}{
		{"unknown episode", func() error {
			_, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: "ep-nope", Action: json.RawMessage("1")})
			return err
		}, wire.CodeRuntimeError, "unknown episode"},
		{"closed episode", func() error {
			_, err := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: closed.EpisodeID})
			return err
		}, wire.CodeRuntimeError, "episode is closed"},
		{"finished episode", func() error {
			_, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: done.EpisodeID, Action: json.RawMessage("0")})
			return err
		}, wire.CodeRuntimeError, "is terminated"},
		{"unknown env", func() error {
			_, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "nope"})
			return err
		}, wire.CodeRuntimeError, "unknown environment"},
		{"bad action", func() error {
			_, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: open.EpisodeID, Action: json.RawMessage(`"five"`)})
			return err
		}, wire.CodeRuntimeError, "bad action"},
		{"bad options", func() error {
			_, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName, EpisodeID: &open.EpisodeID, Options: rawp(`{"high":0}`)})
			return err
		}, wire.CodeRuntimeError, "high"},
		{"reset with another env", func() error {
			_, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "test/sleep", EpisodeID: &open.EpisodeID})
			return err
		}, wire.CodeRuntimeError, "runs"},
		{"episode cap", func() error {
			_, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName})
			return err
		}, wire.CodeRuntimeError, "limit"},
		{"batch length mismatch", func() error {
			_, err := c.EnvStepBatch(ctx, &msg.EnvStepBatchReq{EpisodeIds: []string{open.EpisodeID}, Actions: []json.RawMessage{}, AutoresetMode: "next_step"})
			return err
		}, wire.CodeSchemaViolation, "actions"},
		{"batch duplicate", func() error {
			_, err := c.EnvStepBatch(ctx, &msg.EnvStepBatchReq{EpisodeIds: []string{open.EpisodeID, open.EpisodeID},
				Actions: []json.RawMessage{json.RawMessage("1"), json.RawMessage("1")}, AutoresetMode: "next_step"})
			return err
		}, wire.CodeSchemaViolation, "twice"},
		{"batch bad mode", func() error {
			_, err := c.EnvStepBatch(ctx, &msg.EnvStepBatchReq{EpisodeIds: []string{open.EpisodeID},
				Actions: []json.RawMessage{json.RawMessage("1")}, AutoresetMode: "sometimes"})
			return err
		}, wire.CodeSchemaViolation, "autoreset_mode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { aeptest.WantError(t, tc.call(), tc.code, tc.sub) })
	}
	// The refused requests changed nothing.
	ob, err := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: open.EpisodeID})
	if err != nil || ob.Step != 0 || ob.Status != "running" {
		t.Fatalf("%+v %v", ob, err)
	}
}

func TestStepTimeoutClosesEpisode(t *testing.T) {
	h := newHost(t, &env.Plugin{Settings: env.Settings{StepTimeout: 100e6}})
	c := aeptest.ConnectWith(t, h, directCodec(), nil, "env")
	ctx := aeptest.Context(t)
	r := reset(t, c, "test/sleep", 0, "")
	if st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage("1")}); err != nil || st.Step != 1 {
		t.Fatalf("fast step: %+v %v", st, err)
	}
	_, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage("5000")})
	aeptest.WantError(t, err, wire.CodeTimeout, "step timeout")
	_, err = c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage("1")})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "step timeout")
}

func TestAutoresetModes(t *testing.T) {
	h := newHost(t, &env.Plugin{})
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			c := aeptest.ConnectWith(t, h, cd.codec, nil, "env")
			ctx := aeptest.Context(t)
			// high 1: the secret is 0, so guess 0 terminates and guess 5 does
			// not (max_steps 3 truncates it on its third guess).
			a := reset(t, c, env.GuessName, 1, `{"high":1,"max_steps":3}`).EpisodeID
			b := reset(t, c, env.GuessName, 1, `{"high":1,"max_steps":3}`).EpisodeID
			batch := func(mode string) (*msg.EnvStepBatchResp, error) {
				return c.EnvStepBatch(ctx, &msg.EnvStepBatchReq{EpisodeIds: []string{a, b},
					Actions: []json.RawMessage{json.RawMessage("0"), json.RawMessage("5")}, AutoresetMode: msg.EnvStepBatchReqAutoresetMode(mode)})
			}
			isReset := func(r msg.BatchStep) bool { return r.Reset != nil && *r.Reset }

			// next_step: a finishes on batch 1 and is reset on batch 2, its action ignored.
			r1, err := batch("next_step")
			if err != nil {
				t.Fatal(err)
			}
			if x := r1.Results[0]; !x.Terminated || x.Reward != 1 || isReset(x) || x.Step != 1 {
				t.Fatalf("next_step batch 1, a: %+v", x)
			}
			if x := r1.Results[1]; x.Terminated || x.Truncated || x.Step != 1 {
				t.Fatalf("next_step batch 1, b: %+v", x)
			}
			r2, err := batch("next_step")
			if err != nil {
				t.Fatal(err)
			}
			if x := r2.Results[0]; !isReset(x) || x.Reward != 0 || x.Terminated || x.Step != 0 || decodeObs(t, x.Observation).Guesses != 0 {
				t.Fatalf("next_step batch 2, a: %+v", x)
			}
			if x := r2.Results[1]; x.Step != 2 || isReset(x) {
				t.Fatalf("next_step batch 2, b: %+v", x)
			}
			r3, err := batch("next_step")
			if err != nil {
				t.Fatal(err)
			}
			if x := r3.Results[0]; !x.Terminated || x.Step != 1 {
				t.Fatalf("next_step batch 3, a: %+v", x)
			}
			if x := r3.Results[1]; !x.Truncated || x.Step != 3 {
				t.Fatalf("next_step batch 3, b: %+v", x)
			}

			// disabled: both are finished now, so the batch is refused whole.
			_, err = batch("disabled")
			aeptest.WantError(t, err, wire.CodeRuntimeError, "autoreset is disabled")
			for _, id := range []string{a, b} {
				if _, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName, EpisodeID: &id, Options: rawp(`{"high":1,"max_steps":3}`)}); err != nil {
					t.Fatal(err)
				}
			}
			d1, err := batch("disabled")
			if err != nil {
				t.Fatal(err)
			}
			if x := d1.Results[0]; !x.Terminated || isReset(x) {
				t.Fatalf("disabled batch 1, a: %+v", x)
			}
			_, err = batch("disabled")
			aeptest.WantError(t, err, wire.CodeRuntimeError, "autoreset is disabled")
			ob, _ := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: b})
			if ob.Step != 1 {
				t.Fatalf("a refused batch stepped b: %+v", ob)
			}

			// same_step: a finishes and is reset within the step; the final
			// observation travels beside the reset one.
			if _, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName, EpisodeID: &a, Options: rawp(`{"high":1,"max_steps":3}`)}); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				s, err := batch("same_step")
				if err != nil {
					t.Fatal(err)
				}
				x := s.Results[0]
				if !x.Terminated || x.Reward != 1 || !isReset(x) || x.Step != 0 || x.FinalObservation == nil ||
					decodeObs(t, *x.FinalObservation).Hint != 0 || decodeObs(t, x.Observation).Guesses != 0 {
					t.Fatalf("same_step batch %d, a: %+v", i, x)
				}
			}
			ob, _ = c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: a})
			if ob.Status != "running" {
				t.Fatalf("same_step left a finished: %+v", ob)
			}
		})
	}
}

func TestOtherSessionsEpisodesAreInvisible(t *testing.T) {
	h := newHost(t, &env.Plugin{})
	a, b := aeptest.ConnectWith(t, h, directCodec(), nil, "env"), aeptest.ConnectWith(t, h, directCodec(), nil, "env")
	ctx := aeptest.Context(t)
	ep := reset(t, a, env.GuessName, 3, "").EpisodeID
	calls := map[string]func() error{
		"step": func() error {
			_, err := b.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep, Action: json.RawMessage("1")})
			return err
		},
		"observe": func() error { _, err := b.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: ep}); return err },
		"render":  func() error { _, err := b.EnvRender(ctx, &msg.EnvRenderReq{EpisodeID: ep}); return err },
		"close":   func() error { _, err := b.EnvClose(ctx, &msg.EnvCloseReq{EpisodeID: ep}); return err },
		"reset": func() error {
			_, err := b.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName, EpisodeID: &ep})
			return err
		},
		"batch": func() error {
			_, err := b.EnvStepBatch(ctx, &msg.EnvStepBatchReq{EpisodeIds: []string{ep}, Actions: []json.RawMessage{json.RawMessage("1")}, AutoresetMode: "next_step"})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) { aeptest.WantError(t, call(), wire.CodeRuntimeError, "unknown episode") })
	}
	if ob, err := a.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: ep}); err != nil || ob.Step != 0 {
		t.Fatalf("owner lost its episode: %+v %v", ob, err)
	}
}
