package chains_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/internal/aeptest"
)

// TestWireConformance drives chains as raw lines on the in-process JSON
// pipe and checks every line against schemas/ with the conformance
// recorder: the agent's requests, the chain/event and forwarded tool/event
// events, the replies, and the error of a refused graph. Events come before
// their request's reply, with req_id set (spec §6).
func TestWireConformance(t *testing.T) {
	e := newEnv(t, envOpts{})
	rec := conformance.NewRecorder(t)
	pipe, err := e.h.ConnectLines(64)
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	ctx := aeptest.Context(t)
	// exchange sends one line and reads up to its reply.
	exchange := func(line string) (events []map[string]any, reply map[string]any) {
		t.Helper()
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(line)); err != nil {
			t.Fatal(err)
		}
		line = buf.String()
		rec.Agent([]byte(line))
		if err := pipe.WriteLine(ctx, []byte(line)); err != nil {
			t.Fatal(err)
		}
		for {
			out, err := pipe.ReadLine(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rec.Host(out)
			var m map[string]any
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatal(err)
			}
			if typ, _ := m["type"].(string); typ == "chain/event" || typ == "tool/event" {
				events = append(events, m)
				continue
			}
			return events, m
		}
	}
	if _, r := exchange(`{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["chains","tools"],"auth_token":"` + aeptest.Token + `"}`); r["ok"] != true {
		t.Fatalf("handshake: %v", r)
	}
	evs, r := exchange(`{"type":"chain/run/req","id":"c1","proto":"1.0","ts":1,"input":{"msg":"hi"},"chain":{"nodes":[
		{"id":"w","kind":"action","request":{"type":"tool/call/req","body":{"tool_name":"write_file","arguments":{"path":"a.txt","content":"{{input.msg}}"}}}},
		{"id":"run","kind":"action","request":{"type":"tool/call/req","body":{"tool_name":"run_command","streaming":true,"arguments":{"argv":["cat","a.txt"]}}}},
		{"id":"ok","kind":"branch","condition":"nodes.run.output.result.success"},
		{"id":"g","kind":"gather"}],
		"edges":[{"from":"w","to":"run"},{"from":"run","to":"ok"},{"from":"ok","to":"g","when":true}]}}`)
	if r["type"] != "chain/run/resp" || r["req_id"] != "c1" || r["success"] != true {
		t.Fatalf("reply %v", r)
	}
	var toolEvents int
	for _, ev := range evs {
		if ev["req_id"] != "c1" {
			t.Errorf("event for %v", ev["req_id"])
		}
		if ev["type"] == "tool/event" {
			toolEvents++
		}
	}
	if len(evs) < 8 || toolEvents == 0 {
		t.Errorf("%d events, %d forwarded tool events", len(evs), toolEvents)
	}
	_, r = exchange(`{"type":"chain/run/req","id":"c2","proto":"1.0","ts":1,"chain":{"nodes":[{"id":"a","kind":"gather"}],"edges":[{"from":"a","to":"b"}]}}`)
	if r["type"] != "error" || r["code"] != "schema_violation" || r["capability_name"] != "chains" {
		t.Errorf("refused graph: %v", r)
	}
	if h, a := rec.Counts(); h < 10 || a != 3 {
		t.Errorf("checked %d host and %d agent lines", h, a)
	}
}
