package persist

import (
	"encoding/json"
	"testing"
)

// rec makes a record of session h from a message written as JSON.
func rec(h string, seq int64, dir, kind, msgJSON string) TrajectoryRecord {
	var m map[string]any
	if err := json.Unmarshal([]byte(msgJSON), &m); err != nil {
		panic(err)
	}
	return TrajectoryRecord{Session: h, Seq: seq, Dir: dir, Kind: kind, Type: m["type"].(string), Message: m}
}

// The default reward rule of docs/trajectories.md: a step rated by its
// envelope id or its correlation_id, an episode rated by feedback naming
// no step, a score as given, feedback the host refused left out, a
// correction beside the message it corrects.
func TestChatSampleRewards(t *testing.T) {
	step := func(h string, seq int64, id string, reward float64) []TrajectoryRecord {
		r, _ := json.Marshal(reward)
		return []TrajectoryRecord{
			rec(h, seq, "agent", "request", `{"type":"env/step/req","id":"`+id+`","episode_id":"e","action":1}`),
			rec(h, seq+1, "host", "reply", `{"type":"env/step/resp","id":"x`+id+`","req_id":"`+id+`","reward":`+string(r)+`}`),
		}
	}
	feedback := func(h string, seq int64, id, fbs string, accepted bool) []TrajectoryRecord {
		reply := `{"type":"learn/feedback/resp","id":"y` + id + `","req_id":"` + id + `","recorded":1}`
		kind := "reply"
		if !accepted {
			reply, kind = `{"type":"error","id":"y`+id+`","req_id":"`+id+`","code":"schema_violation","message":"no"}`, "error"
		}
		return []TrajectoryRecord{
			rec(h, seq, "agent", "request", `{"type":"learn/feedback/req","id":"`+id+`","feedbacks":`+fbs+`}`),
			rec(h, seq+1, "host", kind, reply),
		}
	}
	cat := func(parts ...[]TrajectoryRecord) []TrajectoryRecord {
		var out []TrajectoryRecord
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tool := []TrajectoryRecord{
		rec("h", 4, "agent", "request", `{"type":"tool/call/req","id":"t1","tool_name":"read_file","arguments":{},"correlation_id":"mine"}`),
		rec("h", 5, "host", "reply", `{"type":"tool/call/resp","id":"xt1","req_id":"t1","result":{"ok":true}}`),
	}
	for _, tc := range []struct {
		name             string
		recs             []TrajectoryRecord
		env, fb, episode []float64
		total            float64
		corrections      int
		correctionAt     float64
	}{
		{"no feedback", cat(step("h", 0, "s1", 0), step("h", 2, "s2", 1)), []float64{0, 1}, []float64{0, 0}, nil, 1, 0, 0},
		{"a step by id, by type", cat(step("h", 0, "s1", 0), step("h", 2, "s2", 1),
			feedback("h", 4, "f1", `[{"type":"POSITIVE","correlation_id":"s2"},{"type":"NEGATIVE","correlation_id":"s1"}]`, true)),
			[]float64{0, 1}, []float64{-1, 1}, nil, 1, 0, 0},
		{"a score as given, the episode", cat(step("h", 0, "s1", 1),
			feedback("h", 2, "f1", `[{"type":"NEUTRAL","score":0.25},{"type":"POSITIVE","correlation_id":"unknown"}]`, true)),
			[]float64{1}, []float64{0}, []float64{0.25, 1}, 2.25, 0, 0},
		{"refused feedback counts nothing", cat(step("h", 0, "s1", 1),
			feedback("h", 2, "f1", `[{"type":"POSITIVE","correlation_id":"s1"}]`, false)),
			[]float64{1}, []float64{0}, nil, 1, 0, 0},
		{"a rated tool call rates the episode; a correction by correlation_id", cat(step("h", 0, "s1", 0), tool,
			feedback("h", 6, "f1", `[{"type":"CORRECTIVE","correlation_id":"mine","correction":"read the other file"}]`, true)),
			[]float64{0}, []float64{0}, []float64{-0.5}, -0.5, 1, 2},
		{"another session's ids are not this one's", cat(step("h", 0, "s1", 0),
			feedback("g", 0, "f1", `[{"type":"POSITIVE","correlation_id":"s1"}]`, true)),
			[]float64{0}, []float64{0}, []float64{1}, 1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := chatSample(tc.recs, 0)
			floats := func(k string) []float64 {
				var out []float64
				for _, v := range s[k].([]any) {
					out = append(out, v.(float64))
				}
				return out
			}
			eq := func(a, b []float64) bool {
				if len(a) != len(b) {
					return false
				}
				for i := range a {
					if a[i] != b[i] {
						return false
					}
				}
				return true
			}
			env, fb, ep, rw := floats("env_rewards"), floats("feedback_rewards"), floats("episode_rewards"), floats("rewards")
			if !eq(env, tc.env) || !eq(fb, tc.fb) || !eq(ep, tc.episode) || s["total_reward"].(float64) != tc.total {
				t.Fatalf("env %v feedback %v episode %v total %v", env, fb, ep, s["total_reward"])
			}
			for i := range env {
				if rw[i] != env[i]+fb[i] {
					t.Fatalf("rewards %v", rw)
				}
			}
			cs, _ := s["corrections"].([]any)
			if len(cs) != tc.corrections {
				t.Fatalf("corrections %v", cs)
			}
			if tc.corrections > 0 {
				c := cs[0].(map[string]any)
				if c["message_index"].(int) != int(tc.correctionAt) || c["tool_call_id"] != "t1" {
					t.Fatalf("correction %v", c)
				}
			}
			for _, m := range s["messages"].([]any) {
				if calls, ok := m.(map[string]any)["tool_calls"].([]any); ok {
					if name := calls[0].(map[string]any)["function"].(map[string]any)["name"]; name == "learn_feedback" {
						t.Fatal("the feedback call is among the messages")
					}
				}
			}
		})
	}
}
