package learn_test

import (
	"context"
	"encoding/json"
	"github.com/aephost/aep/internal/aeptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aephost/aep/capabilities/learn"
	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
)

// testHost is a host with a real SQLite store and data directory under dir,
// serving the built-in tools and the learn plugin.
type testHost struct {
	h     *server.Host
	st    *store.Store
	audit *auditLog
}

// auditLog collects the host's audit records through the same in-process
// subscription the learn plugin uses.
type auditLog struct {
	mu   sync.Mutex
	recs []server.AuditRecord
}

func (a *auditLog) add(r server.AuditRecord) {
	a.mu.Lock()
	a.recs = append(a.recs, r)
	a.mu.Unlock()
}

func (a *auditLog) all() []server.AuditRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]server.AuditRecord(nil), a.recs...)
}

// startHost opens the store in dir and starts a host on it; close stops
// both, host first, as `aep serve` does.
func startHost(t testing.TB, dir string) (th *testHost, close func()) {
	t.Helper()
	return startHostDSN(t, dir, "")
}

// startHostDSN is startHost on the store dsn names ("" is SQLite in dir).
func startHostDSN(t testing.TB, dir, dsn string) (th *testHost, close func()) {
	t.Helper()
	return startHostWith(t, dir, dsn, &learn.Plugin{})
}

// startHostWith is startHostDSN serving the learn plugin lp.
func startHostWith(t testing.TB, dir, dsn string, lp *learn.Plugin) (th *testHost, close func()) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(ctx, aeptest.Config(nil), server.WithStore(st), server.WithDataDir(dir),
		server.WithPlugin(server.PluginSpec{Name: "tools", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: filepath.Join(dir, "ws")}}}),
		server.WithPlugin(server.PluginSpec{Name: "learn", Type: "learn", Impl: lp}))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	a := &auditLog{}
	unsub := h.SubscribeAudit(a.add)
	var once sync.Once
	close = func() {
		once.Do(func() {
			unsub()
			if err := h.Close(context.Background()); err != nil {
				t.Errorf("host close: %v", err)
			}
			if err := st.Close(); err != nil {
				t.Errorf("store close: %v", err)
			}
		})
	}
	t.Cleanup(close)
	return &testHost{h: h, st: st, audit: a}, close
}

func connect(t testing.TB, h *server.Host, caps ...string) *client.Client {
	t.Helper()
	if len(caps) == 0 {
		caps = []string{"learn", "tools"}
	}
	return aeptest.Connect(t, h, caps...)
}

func tool(name string) *msg.Component { return &msg.Component{Kind: "tool", Name: name} }

// feedback sends one learn/feedback/req and fails the test on error.
func feedback(t testing.TB, c *client.Client, fbs ...msg.Feedback) *msg.LearnFeedbackResp {
	t.Helper()
	r, err := c.LearnFeedback(aeptest.Context(t), &msg.LearnFeedbackReq{Feedbacks: fbs})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fb builds n feedbacks of one type on a tool in a context.
func fb(n int, typ msg.FeedbackType, name, context string) []msg.Feedback {
	out := make([]msg.Feedback, n)
	for i := range out {
		out[i] = msg.Feedback{Type: typ, Component: tool(name), Context: aeptest.Ptr(context)}
		if typ == msg.FeedbackTypeCORRECTIVE {
			out[i].Correction = aeptest.Ptr("use a narrower pattern")
		}
	}
	return out
}

// exportAll pages through learn/export and returns every line decoded.
func exportAll(t testing.TB, c *client.Client, what msg.LearnExportReqWhat, limit int) (lines []map[string]any, pages int) {
	t.Helper()
	var cursor *string
	for {
		r, err := c.LearnExport(aeptest.Context(t), &msg.LearnExportReq{What: what, Limit: aeptest.Ptr(limit), Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		text := *r.Jsonl
		if text != "" && !strings.HasSuffix(text, "\n") {
			t.Fatalf("page does not end in a newline: %q", text)
		}
		n := 0
		for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if l == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("export line %q: %v", l, err)
			}
			lines = append(lines, m)
			n++
		}
		if n != r.Count {
			t.Fatalf("page count %d, lines %d", r.Count, n)
		}
		if r.NextCursor == nil {
			return lines, pages
		}
		cursor = r.NextCursor
	}
}

// rankNames returns the names of a ranking, best first.
func rankNames(r *msg.LearnRankResp) []string {
	out := make([]string, len(r.Ranked))
	for i, c := range r.Ranked {
		out[i] = c.Name
	}
	return out
}

// stats returns learn/stats of kind "tool" keyed by name.
func statsByName(t testing.TB, c *client.Client) map[string]msg.ComponentStats {
	t.Helper()
	r, err := c.LearnStats(aeptest.Context(t), &msg.LearnStatsReq{Kind: aeptest.Ptr("tool")})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]msg.ComponentStats{}
	for _, s := range r.Components {
		out[s.Name] = s
	}
	return out
}
