package all_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kaptinlin/jsonschema"

	"github.com/aephost/aep/gen/contract"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// The schema and the host agree on every edge (schemas/edges/README.md):
// each line of schemas/edges/corpus.jsonl goes to a real host with every
// built-in plugin, in a session of its own, and the host's verdict —
// refused as malformed (parse_error, schema_violation, version_mismatch)
// or not — is the corpus's; a stock validator (kaptinlin/jsonschema)
// gives the same verdict against the published bundle's AgentMessage.
// .ci/run asks ajv and python-jsonschema the same of the same file
// (.ci/contract/edges.mjs, .ci/contract/edges.py).

// edgeRecord is one line of the corpus.
type edgeRecord struct {
	Line  string `json:"line"`
	Valid bool   `json:"valid"`
	Why   string `json:"why"`
	// Rule names a rule the contract states in words, not as a keyword
	// (schemas/edges/README.md, Rules in words): stock validators are not
	// asked, and the host must refuse the line with the rule's code —
	// "i-json" (a line is one I-JSON text) parse_error, "graph" (the rules
	// of a chain's graph as a whole) schema_violation.
	Rule string `json:"rule"`
	// Session is "fresh" for a line sent before any handshake (the
	// handshakes); otherwise the line follows a successful handshake.
	Session string `json:"session"`
}

// edgeToken is the host's auth_token in the corpus run.
const edgeToken = "edge-corpus-token-5f1c"

// ruleCodes are the rules in words and the code each answers.
var ruleCodes = map[string]string{"": "", "i-json": string(wire.CodeParseError), "graph": string(wire.CodeSchemaViolation)}

// malformedCodes are the codes that say a line breaks its schema: the
// verdict the corpus's valid false predicts.
var malformedCodes = []string{string(wire.CodeParseError), string(wire.CodeSchemaViolation), string(wire.CodeVersionMismatch)}

func loadCorpus(t *testing.T) []edgeRecord {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "schemas", "edges", "corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []edgeRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var r edgeRecord
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("corpus.jsonl line %d: %v", n, err)
		}
		if _, known := ruleCodes[r.Rule]; r.Why == "" || (r.Rule != "" && !known) || (r.Session != "" && r.Session != "fresh" && r.Session != "live") {
			t.Fatalf("corpus.jsonl line %d: a record needs why; rule is i-json, graph or absent; session fresh, live or absent", n)
		}
		if r.Rule != "" && r.Valid {
			t.Fatalf("corpus.jsonl line %d: a rule in words only refuses lines", n)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// agentMessageValidator compiles the published bundle and returns its
// AgentMessage, as a stock validator user would.
func agentMessageValidator(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme) // the bundle's references are all its own
	}
	if _, err := c.Compile(contract.Bundle); err != nil {
		t.Fatalf("compile the bundle: %v", err)
	}
	s, err := c.Compile([]byte(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://aephost.dev/contract/edges-agent.json", "$ref": "` + contract.BundleID + `#/$defs/AgentMessage"}`))
	if err != nil {
		t.Fatalf("compile AgentMessage: %v", err)
	}
	return s
}

func newEdgeHost(t *testing.T) *server.Host {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := aeptest.Config(func(c *server.Config) {
		c.Server.AuthToken = edgeToken
		for _, p := range []string{"tools", "toolkits", "memory", "env", "proc", "learn", "skills", "chains", "subagents"} {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
		c.Plugins = append(c.Plugins, server.PluginConfig{Name: "mcp", Type: "mcp", Cls: "aep.mcp.bridge"})
	})
	h, err := server.New(ctx, cfg, server.WithDataDir(dir), server.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func TestEdgeCorpus(t *testing.T) {
	recs := loadCorpus(t)
	if len(recs) < 150 {
		t.Fatalf("the corpus has %d lines; it must keep at least 150", len(recs))
	}
	agent := agentMessageValidator(t)
	h := newEdgeHost(t)
	types := map[string]bool{}
	disagree := 0
	for i, r := range recs {
		var probe struct {
			Type any `json:"type"`
		}
		if json.Unmarshal([]byte(r.Line), &probe) == nil {
			if s, ok := probe.Type.(string); ok {
				types[s] = true
			}
		}
		if r.Rule == "" {
			if got := agent.Validate([]byte(r.Line)).IsValid(); got != r.Valid {
				disagree++
				t.Errorf("line %d (%s): the bundle's AgentMessage says valid=%v, the corpus %v\n%s", i+1, r.Why, got, r.Valid, r.Line)
			}
		}
		malformed, code, answer, err := hostVerdict(t, h, r)
		if err != nil {
			t.Fatalf("line %d (%s): %v\n%s", i+1, r.Why, err, r.Line)
		}
		switch {
		case r.Rule != "" && code != ruleCodes[r.Rule]:
			disagree++
			t.Errorf("line %d (%s): the host answered %s, want %s (rule %s)\n%s", i+1, r.Why, answer, ruleCodes[r.Rule], r.Rule, r.Line)
		case malformed == r.Valid:
			disagree++
			t.Errorf("line %d (%s): the host answered %s; the schema says valid=%v\n%s", i+1, r.Why, answer, r.Valid, r.Line)
		}
	}
	// Every type of the contract, an agent's or a host's, has its lines.
	for _, e := range msg.Registry().Entries() {
		if !types[e.Type] {
			t.Errorf("no line of the corpus has type %s", e.Type)
		}
	}
	for _, ns := range msg.Registry().Namespaces() {
		if !types[ns.Event] {
			t.Errorf("no line of the corpus has type %s", ns.Event)
		}
	}
	t.Logf("%d lines, %d types, %d disagreements", len(recs), len(types), disagree)
}

// hostVerdict sends r's line to h in a session of its own and reports
// whether the host refused it as malformed, with the code (if any) and the
// answer for a failure message. A request's verdict is its reply; for a
// line the host answers nothing (a notification), a ping sent after it
// answers first, as decoding errors are sent before the next line is read.
func hostVerdict(t *testing.T, h *server.Host, r edgeRecord) (malformed bool, code, answer string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := h.ConnectLines(256)
	if err != nil {
		return false, "", "", err
	}
	defer p.Close()
	if r.Session != "fresh" {
		hs := fmt.Appendf(nil, `{"type":"handshake/req","id":"edge-hs","proto":"1.0","ts":%d,"agent_id":"edges","agent_caps":["tools","toolkits","memory","env","proc","learn","skills","chains","mcp","subagents"],"auth_token":%q}`, time.Now().Unix(), edgeToken)
		if err := p.WriteLine(ctx, hs); err != nil {
			return false, "", "", err
		}
		for {
			l, err := p.ReadLine(ctx)
			if err != nil {
				return false, "", "", fmt.Errorf("handshake: %w", err)
			}
			var m struct {
				Type string `json:"type"`
				OK   bool   `json:"ok"`
			}
			if json.Unmarshal(l, &m) == nil && m.Type == "handshake/resp" {
				if !m.OK {
					return false, "", "", fmt.Errorf("handshake refused: %s", l)
				}
				break
			}
		}
	}
	var sc wire.Scanned
	scanErr := wire.Scan([]byte(r.Line), &sc)
	id := sc.ID
	if sc.IDNotString {
		id = ""
	}
	e := msg.Registry().Lookup(sc.Type)
	expectsReply := scanErr == nil && id != "" && e != nil && (e.Kind == wire.KindRequest)
	if err := p.WriteLine(ctx, []byte(r.Line)); err != nil {
		return false, "", "", err
	}
	// A line that ends the session (shutdown) may close it before the ping
	// is written: what the host sent before the end is read all the same.
	_ = p.WriteLine(ctx, []byte(`{"type":"ping","id":"edge-ping","proto":"1.0","ts":1712345678.5}`))
	for {
		l, err := p.ReadLine(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return false, "", "", fmt.Errorf("no answer within the deadline")
			}
			// The session ended (shutdown) without refusing the line.
			return false, "", "the session's end", nil
		}
		var m struct {
			Type  string `json:"type"`
			ReqID string `json:"req_id"`
			Code  string `json:"code"`
			OK    *bool  `json:"ok"`
			// Error is handshake/resp's error object (elsewhere it may be
			// a string: mcp/server/register/resp).
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(l, &m); err != nil {
			return false, "", "", fmt.Errorf("the host sent a line that is not JSON: %s", l)
		}
		switch {
		case m.Type == "error" && (m.ReqID == id || m.ReqID == ""):
			return slices.Contains(malformedCodes, m.Code), m.Code, string(l), nil
		case m.Type == "handshake/resp" && m.ReqID == id:
			var body struct {
				Code string `json:"code"`
			}
			if m.OK != nil && !*m.OK && json.Unmarshal(m.Error, &body) == nil {
				return slices.Contains(malformedCodes, body.Code), body.Code, string(l), nil
			}
			return false, "", string(l), nil
		case m.ReqID == id && id != "" && !strings.HasSuffix(m.Type, "/event"):
			return false, "", string(l), nil
		case m.Type == "pong" && m.ReqID == "edge-ping" && !expectsReply:
			return false, "", "no reply (a notification)", nil
		}
	}
}
