package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// run is a report of one transport's run with the answers given.
func run(transport, uniq string, answers ...answer) *Report {
	return &Report{Transport: transport, uniq: uniq, answers: answers}
}

func reply(body map[string]any) map[string]any { return body }

// TestAgree: what the comparison sets aside and what it holds, case by
// case: two runs over different transports of one host, each answer held
// to the first run's of the same request.
func TestAgree(t *testing.T) {
	tests := []struct {
		name     string
		a, b     answer
		uniqA    string
		uniqB    string
		problem  string // a part of the one problem expected; "" none
		compared int
	}{
		{name: "ids, times and the run's names aside",
			a: answer{key: "s/A#1/1", req: "memory/init/req", reply: reply(map[string]any{"type": "memory/init/resp", "id": "h-1", "ts": 1.5, "req_id": "c-3",
				"memory_id": "mem-1111", "namespace": "aep-conformance-memory-aaaa", "created_at": 10.0, "bytes": 1941.0})},
			b: answer{key: "s/A#1/1", req: "memory/init/req", reply: reply(map[string]any{"type": "memory/init/resp", "id": "h-9", "ts": 7.5, "req_id": "c-8",
				"memory_id": "mem-2222", "namespace": "aep-conformance-memory-bbbb", "created_at": 99.0, "bytes": 1940.0})},
			uniqA: "aaaa", uniqB: "bbbb", compared: 1},
		{name: "an id named again in a text",
			a:        answer{key: "k/1", req: "x/req", reply: reply(map[string]any{"type": "error", "code": "schema_violation", "message": "episode ep-12345 is closed", "episode_id": "ep-12345"})},
			b:        answer{key: "k/1", req: "x/req", reply: reply(map[string]any{"type": "error", "code": "schema_violation", "message": "episode ep-67890 is closed", "episode_id": "ep-67890"})},
			compared: 1},
		{name: "an id containing another, replaced whole",
			a:        answer{key: "k/1", req: "x/req", reply: reply(map[string]any{"type": "x/resp", "a_id": "ab12", "b_id": "ab123", "message": "ab123 ended"})},
			b:        answer{key: "k/1", req: "x/req", reply: reply(map[string]any{"type": "x/resp", "a_id": "cd45", "b_id": "cd456x", "message": "cd456x ended"})},
			compared: 1},
		{name: "the run's name first, then the host's ids",
			a:     answer{key: "k/1", req: "x/req", reply: reply(map[string]any{"type": "x/resp", "note_id": "c-12", "name": "aep-conformance-c-12ef51a0"})},
			b:     answer{key: "k/1", req: "x/req", reply: reply(map[string]any{"type": "x/resp", "note_id": "c-99", "name": "aep-conformance-c-99ab0000"})},
			uniqA: "12ef51a0", uniqB: "99ab0000", compared: 1},
		{name: "a different content",
			a:       answer{key: "k/1", req: "session/info/req", reply: reply(map[string]any{"type": "session/info/resp", "budgets": map[string]any{"files": map[string]any{"limit": 10.0}}})},
			b:       answer{key: "k/1", req: "session/info/req", reply: reply(map[string]any{"type": "session/info/resp", "budgets": map[string]any{"files": map[string]any{"limit": 5.0}}})},
			problem: "k/1 (session/info/req): over stdio reply.budgets.files.limit 10, over websocket reply.budgets.files.limit 5", compared: 1},
		{name: "a different code",
			a:       answer{key: "k/1", req: "env/step/req", reply: reply(map[string]any{"type": "error", "code": "schema_violation"})},
			b:       answer{key: "k/1", req: "env/step/req", reply: reply(map[string]any{"type": "error", "code": "runtime_error"})},
			problem: `reply.code "schema_violation", over websocket reply.code "runtime_error"`, compared: 1},
		{name: "no reply over one",
			a:       answer{key: "k/1", req: "ping", reply: reply(map[string]any{"type": "pong", "uptime_seconds": 3.0})},
			b:       answer{key: "k/1", req: "ping"},
			problem: `over websocket reply "(none)"`, compared: 1},
		{name: "a field only one has",
			a:       answer{key: "k/1", req: "ping", reply: reply(map[string]any{"type": "pong"})},
			b:       answer{key: "k/1", req: "ping", reply: reply(map[string]any{"type": "pong", "note": "x"})},
			problem: `reply.note "(absent)"`, compared: 1},
		{name: "a request only one run made is not compared",
			a:        answer{key: "k/1", req: "ping", reply: reply(map[string]any{"type": "pong"})},
			b:        answer{key: "k|no attach/2", req: "ping", reply: reply(map[string]any{"type": "error"})},
			compared: 0},
		{name: "events in another order, the same events",
			a: answer{key: "k/1", req: "tool/call/req", reply: reply(map[string]any{"type": "tool/call/resp"}),
				events: []map[string]any{{"kind": "log", "data": map[string]any{"line": "a"}, "seq": 0.0}, {"kind": "log", "data": map[string]any{"line": "b"}, "seq": 1.0}}},
			b: answer{key: "k/1", req: "tool/call/req", reply: reply(map[string]any{"type": "tool/call/resp"}),
				events: []map[string]any{{"kind": "log", "data": map[string]any{"line": "b"}, "seq": 0.0}, {"kind": "log", "data": map[string]any{"line": "a"}, "seq": 1.0}}},
			compared: 1},
		{name: "an event missing",
			a: answer{key: "k/1", req: "tool/call/req", reply: reply(map[string]any{"type": "tool/call/resp"}),
				events: []map[string]any{{"kind": "log"}, {"kind": "log"}}},
			b: answer{key: "k/1", req: "tool/call/req", reply: reply(map[string]any{"type": "tool/call/resp"}),
				events: []map[string]any{{"kind": "log"}}},
			problem: "events.count 2, over websocket events.count 1", compared: 1},
		{name: "unordered: lists as multisets, events by kind",
			a: answer{key: "k/1", req: "chain/run/req", mode: compareUnordered, reply: reply(map[string]any{"type": "chain/run/resp", "ran": []any{"a", "b"}}),
				events: []map[string]any{{"kind": "progress", "data": map[string]any{"pct": 50.0}}}},
			b: answer{key: "k/1", req: "chain/run/req", mode: compareUnordered, reply: reply(map[string]any{"type": "chain/run/resp", "ran": []any{"b", "a"}}),
				events: []map[string]any{{"kind": "progress", "data": map[string]any{"pct": 100.0}}}},
			compared: 1},
		{name: "unordered still holds the contents",
			a:       answer{key: "k/1", req: "chain/run/req", mode: compareUnordered, reply: reply(map[string]any{"type": "chain/run/resp", "ran": []any{"a", "b"}})},
			b:       answer{key: "k/1", req: "chain/run/req", mode: compareUnordered, reply: reply(map[string]any{"type": "chain/run/resp", "ran": []any{"a"}})},
			problem: `reply.ran "2 elements"`, compared: 1},
		{name: "loose: type and code only",
			a:        answer{key: "k/1", req: "learn/stats/req", mode: compareLoose, reply: reply(map[string]any{"type": "learn/stats/resp", "components": []any{1.0}})},
			b:        answer{key: "k/1", req: "learn/stats/req", mode: compareLoose, reply: reply(map[string]any{"type": "learn/stats/resp", "components": []any{}})},
			compared: 1},
		{name: "loose still holds the code",
			a:       answer{key: "k/1", req: "learn/stats/req", mode: compareLoose, reply: reply(map[string]any{"type": "learn/stats/resp"})},
			b:       answer{key: "k/1", req: "learn/stats/req", mode: compareLoose, reply: reply(map[string]any{"type": "error", "code": "capability_missing"})},
			problem: `reply.code "(absent)", over websocket reply.code "capability_missing"`, compared: 1},
		{name: "a poll: loosely",
			a:        answer{key: "k/3.poll1", req: "proc/read/req", mode: comparePoll, reply: reply(map[string]any{"type": "proc/read/resp", "stdout": map[string]any{"data": ""}})},
			b:        answer{key: "k/3.poll1", req: "proc/read/req", mode: comparePoll, reply: reply(map[string]any{"type": "proc/read/resp", "stdout": map[string]any{"data": "all"}})},
			compared: 1},
		{name: "another compared run's state in a list",
			a: answer{key: "k/1", req: "learn/stats/req", reply: reply(map[string]any{"type": "learn/stats/resp", "components": []any{
				map[string]any{"name": "aep-conformance-rated-aaaa", "feedbacks": 2.0}}})},
			b: answer{key: "k/1", req: "learn/stats/req", reply: reply(map[string]any{"type": "learn/stats/resp", "components": []any{
				map[string]any{"name": "aep-conformance-rated-aaaa", "feedbacks": 2.0}, map[string]any{"name": "aep-conformance-rated-bbbb", "feedbacks": 2.0}}})},
			uniqA: "aaaa", uniqB: "bbbb", compared: 1},
		{name: "a text that is JSON Lines, as values",
			a:        answer{key: "k/1", req: "learn/export/req", reply: reply(map[string]any{"type": "learn/export/resp", "jsonl": "{\"id\":1,\"x\":\"a\"}\n{\"id\":2,\"x\":\"b\"}\n"})},
			b:        answer{key: "k/1", req: "learn/export/req", reply: reply(map[string]any{"type": "learn/export/resp", "jsonl": "{\"id\":5,\"x\":\"a\"}\n{\"id\":6,\"x\":\"b\"}\n"})},
			compared: 1},
		{name: "JSON Lines that differ",
			a:       answer{key: "k/1", req: "learn/export/req", reply: reply(map[string]any{"type": "learn/export/resp", "jsonl": "{\"id\":1,\"x\":\"a\"}\n{\"id\":2,\"x\":\"b\"}\n"})},
			b:       answer{key: "k/1", req: "learn/export/req", reply: reply(map[string]any{"type": "learn/export/resp", "jsonl": "{\"id\":5,\"x\":\"z\"}\n{\"id\":6,\"x\":\"b\"}\n"})},
			problem: `reply.jsonl.(json).0.x "a", over websocket reply.jsonl.(json).0.x "z"`, compared: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			problems, compared := agree([]*Report{run("stdio", tc.uniqA, tc.a), run("websocket", tc.uniqB, tc.b)})
			if compared != tc.compared {
				t.Errorf("compared %d, want %d", compared, tc.compared)
			}
			switch {
			case tc.problem == "" && len(problems) > 0:
				t.Errorf("problems %q, want none", problems)
			case tc.problem != "" && (len(problems) != 1 || !strings.Contains(problems[0], tc.problem)):
				t.Errorf("problems %q, want one with %q", problems, tc.problem)
			}
		})
	}
}

// TestAgreeHoldsToTheFirst: with three runs, each is held to the first
// run that made the request, and every difference is named once per run.
func TestAgreeHoldsToTheFirst(t *testing.T) {
	a := answer{key: "k/1", req: "ping", reply: map[string]any{"type": "pong"}}
	bad := answer{key: "k/1", req: "ping", reply: map[string]any{"type": "error", "code": "runtime_error"}}
	problems, compared := agree([]*Report{run("stdio", "", a), run("http", "", a), run("websocket", "", bad)})
	if compared != 2 || len(problems) != 1 || !strings.Contains(problems[0], "over stdio") || !strings.Contains(problems[0], "over websocket") {
		t.Fatalf("%d compared, problems %q", compared, problems)
	}
}

// TestCompareNeedsTwo: a comparison of fewer than two transports, or of
// one transport twice, is refused before anything runs.
func TestCompareNeedsTwo(t *testing.T) {
	tg := Target{Name: "stdio", Dial: func(context.Context) (Conn, error) { return nil, nil }}
	for _, targets := range [][]Target{nil, {tg}, {tg, tg}} {
		if _, err := Compare(t.Context(), targets, Options{}); err == nil {
			t.Errorf("%d targets: no error", len(targets))
		}
	}
}

// echoConn answers every request at once with a reply of its reply type.
type echoConn struct {
	k   *kit
	out chan []byte
	n   int
}

func (c *echoConn) Send(_ context.Context, line []byte) error {
	typ, id := lineID(line)
	c.n++
	c.out <- fmt.Appendf(nil, `{"type":%q,"id":"h-%d","proto":"1.0","ts":1,"req_id":%q}`, c.k.replyType(typ), c.n, id)
	return nil
}

func (c *echoConn) Recv(ctx context.Context) ([]byte, error) {
	select {
	case l := <-c.out:
		return l, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *echoConn) Close() error { return nil }

// TestAnswerKeys: a session's requests are keyed by scenario, session and
// place; a poll's requests are numbered apart, so however many a poll
// takes, the requests after it keep their keys; a transport's own path
// marks the keys that follow.
func TestAnswerKeys(t *testing.T) {
	j, err := compiledContract()
	if err != nil {
		t.Fatal(err)
	}
	keys := func(polls int, branch bool) []string {
		k := &kit{judge: j, opts: Options{Timeout: time.Second}, problems: map[string][]string{}, checked: map[string]int{}, notes: map[string]string{},
			sessions: map[string]int{}, answerKeys: map[string]bool{}, scenario: "proc.lifecycle"}
		s := k.newSession(&echoConn{k: k, out: make(chan []byte, 8)}, "proc")
		ctx := context.Background()
		s.call(ctx, "proc/list/req", nil)
		for range polls {
			s.callAs(ctx, comparePoll, "proc/read/req", map[string]any{"proc_id": "p"})
		}
		if branch {
			k.transportBranch("no attach")
		}
		s.call(ctx, "proc/status/req", map[string]any{"proc_id": "p"})
		var out []string
		for _, a := range k.answers {
			out = append(out, a.key)
		}
		return out
	}
	one, three := keys(1, false), keys(3, false)
	if want := []string{"proc.lifecycle/proc#1/1", "proc.lifecycle/proc#1/1.poll1", "proc.lifecycle/proc#1/2"}; !slices.Equal(one, want) {
		t.Fatalf("keys %v, want %v", one, want)
	}
	if three[len(three)-1] != one[len(one)-1] || len(three) != 5 {
		t.Fatalf("after three polls: %v", three)
	}
	if b := keys(1, true); b[2] != "proc.lifecycle/proc#1|no attach/2" {
		t.Fatalf("after a transport's own path: %v", b)
	}
}
