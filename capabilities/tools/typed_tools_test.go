package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kaptinlin/jsonschema"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/toolrun"
)

type reportIn struct {
	Query string   `json:"query" desc:"What to look for."`
	Limit int      `json:"limit,omitempty" desc:"At most this many hits."`
	Tags  []string `json:"tags,omitempty"`
}

type reportOut struct {
	Hits []string       `json:"hits"`
	Note *string        `json:"note"`
	Meta map[string]int `json:"meta"`
}

// report emits one event of each spec §6 kind, then answers; a query without
// a hit leaves every field of its output at Go's zero value (nil slice, nil
// pointer, nil map).
func report(ctx context.Context, in reportIn) (reportOut, error) {
	steps := []func() error{
		func() error { return toolrun.Progress(ctx, 50, "searching") },
		func() error { return toolrun.Status(ctx, "indexed") },
		func() error { return toolrun.Log(ctx, "warn", "slow disk") },
		func() error { return toolrun.Artifact(ctx, "hits.txt", "text/plain", "part one,", false) },
		func() error { return toolrun.Artifact(ctx, "hits.txt", "text/plain", "part two", true) },
	}
	for _, emit := range steps {
		if err := emit(); err != nil {
			return reportOut{}, err
		}
	}
	if in.Query == "none" {
		return reportOut{}, nil
	}
	note := "found"
	return reportOut{Hits: []string{in.Query + "-1", in.Query + "-2"}, Note: &note, Meta: map[string]int{"total": 2}}, nil
}

func reportHost(t *testing.T, codec client.Codec) *client.Client {
	t.Helper()
	r := toolrun.NewRegistry()
	if err := toolrun.Register(r, "report", "Search and report.", report,
		toolrun.Tags("search", "demo"), toolrun.Version("2.1.0"), toolrun.Streaming(), toolrun.Idempotent()); err != nil {
		t.Fatal(err)
	}
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{{Name: "rep", Type: "tools", Impl: tools.NewPlugin(r)}})
	return aeptest.ConnectWith(t, h, codec, nil, "tools")
}

// compileSchema compiles a tool's derived schema with a JSON Schema 2020-12
// validator, as a client that wants it would.
func compileSchema(t *testing.T, what string, s map[string]any) *jsonschema.Schema {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme)
	}
	cs, err := c.Compile(raw)
	if err != nil {
		t.Fatalf("%s %s does not compile: %v", what, raw, err)
	}
	return cs
}

// asJSON gives v as a client decodes it from the wire.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	var out any
	if err := json.Unmarshal([]byte(encode(t, v)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTypedToolDefinitionAndSchemas checks typed tools: a typed
// tool's definition carries every spec §2.5 field, and its input and output
// JSON Schemas, derived from the Go types, are real schemas: the input
// schema accepts the arguments the tool accepts and refuses those it
// refuses, and every result the tool gives conforms to the output schema.
func TestTypedToolDefinitionAndSchemas(t *testing.T) {
	c := reportHost(t, client.JSON)
	ctx := context.Background()
	l, err := c.ListTools(ctx, &msg.ToolListReq{Query: aeptest.Ptr("report")})
	if err != nil || len(l.Tools) != 1 {
		t.Fatalf("list: %+v %v", l, err)
	}
	d := l.Tools[0]
	if d.Name != "report" || d.Description != "Search and report." || !d.Streaming || !d.Idempotent ||
		d.Version != "2.1.0" || strings.Join(d.Tags, ",") != "search,demo" || d.DeferLoading || d.Toolkit != nil {
		t.Fatalf("definition %+v", d)
	}
	params := func(ps []msg.ToolParameter) string {
		var b strings.Builder
		for _, p := range ps {
			desc := ""
			if p.Description != nil {
				desc = *p.Description
			}
			fmt.Fprintf(&b, "%s:%s:%v:%s;", p.Name, p.Type, p.Required != nil && *p.Required, desc)
		}
		return b.String()
	}
	if got, want := params(d.InputParameters), "limit:integer:false:At most this many hits.;query:string:true:What to look for.;tags:array:false:;"; got != want {
		t.Errorf("input_parameters %s, want %s", got, want)
	}
	if got := params(d.OutputParameters); !strings.Contains(got, "hits:array:") || !strings.Contains(got, "meta:object:") || !strings.Contains(got, "note:string:") {
		t.Errorf("output_parameters %s", got)
	}

	in := compileSchema(t, "input_schema", d.InputSchema)
	out := compileSchema(t, "output_schema", d.OutputSchema)
	for _, tc := range []struct {
		args map[string]any
		ok   bool
	}{
		{map[string]any{"query": "go"}, true},
		{map[string]any{"query": "go", "limit": 3, "tags": []any{"a"}}, true},
		{map[string]any{"limit": 3}, false},                   // query missing
		{map[string]any{"query": 5}, false},                   // wrong type
		{map[string]any{"query": "go", "limit": 1.5}, false},  // not an integer
		{map[string]any{"query": "go", "colour": "x"}, false}, // unknown argument
		{map[string]any{"query": "go", "tags": "one"}, false}, // not an array
	} {
		if got := in.Validate(tc.args).IsValid(); got != tc.ok {
			t.Errorf("input_schema on %v: valid %v, want %v", tc.args, got, tc.ok)
		}
		res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "report", Arguments: tc.args})
		if err != nil {
			t.Fatal(err)
		}
		if res.Success != tc.ok {
			t.Errorf("call with %v: success %v, schema says %v (%v)", tc.args, res.Success, tc.ok, deref(res.Error))
		}
	}
	// Every result conforms to the output schema: one whose fields are all
	// set, and one whose slice, map and pointer fields are nil (encoded as
	// null, which the output schema admits for such fields).
	for _, query := range []string{"go", "none"} {
		res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "report", Arguments: map[string]any{"query": query}})
		if err != nil || !res.Success {
			t.Fatalf("call: %+v %v", res, err)
		}
		if r := out.Validate(asJSON(t, res.Data)); !r.IsValid() {
			t.Errorf("result data %s does not conform to output_schema %s: %v", encode(t, res.Data), encode(t, d.OutputSchema), r.Errors)
		}
	}
	if r := out.Validate(map[string]any{"hits": []any{"a"}, "meta": map[string]any{"n": "x"}}); r.IsValid() {
		t.Error("output_schema accepts a map value of the wrong type")
	}
}

// TestTypedToolEmitsEveryEventKind checks spec §6: a tool
// emits progress, status, log and artifact events with the data shapes of
// spec §6; they are collected in the result, and with streaming also sent
// on the wire in order with seq 0, 1, ..., with both codecs.
func TestTypedToolEmitsEveryEventKind(t *testing.T) {
	want := []struct {
		kind string
		data map[string]any
	}{
		{"progress", map[string]any{"pct": 50.0, "message": "searching"}},
		{"status", map[string]any{"message": "indexed"}},
		{"log", map[string]any{"level": "warn", "message": "slow disk"}},
		{"artifact", map[string]any{"name": "hits.txt", "mime": "text/plain", "chunk": "part one,", "final": false}},
		{"artifact", map[string]any{"name": "hits.txt", "mime": "text/plain", "chunk": "part two", "final": true}},
	}
	same := func(got, want map[string]any) bool {
		return encode(t, asJSON(t, got)) == encode(t, want)
	}
	for name, codec := range map[string]client.Codec{"json": client.JSON, "direct": client.Direct} {
		for _, streaming := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/streaming=%v", name, streaming), func(t *testing.T) {
				c := reportHost(t, codec)
				var mu sync.Mutex
				var wire []client.Event
				ctx := client.WithEvents(context.Background(), func(ev client.Event) {
					mu.Lock()
					wire = append(wire, ev)
					mu.Unlock()
				})
				res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "report", Streaming: streaming, Arguments: map[string]any{"query": "go"}})
				if err != nil || !res.Success {
					t.Fatalf("%+v %v", res, err)
				}
				if len(res.Events) != len(want) {
					t.Fatalf("result events %+v", res.Events)
				}
				for i, w := range want {
					if string(res.Events[i].Kind) != w.kind || !same(res.Events[i].Data, w.data) {
						t.Errorf("result event %d: %s %v, want %s %v", i, res.Events[i].Kind, res.Events[i].Data, w.kind, w.data)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if !streaming {
					if len(wire) != 0 {
						t.Fatalf("events on the wire without streaming: %+v", wire)
					}
					return
				}
				if len(wire) != len(want) {
					t.Fatalf("wire events %+v", wire)
				}
				for i, w := range want {
					ev := wire[i]
					if ev.Type != "tool/event" || ev.Seq != i || string(ev.Kind) != w.kind || !same(ev.Data, w.data) {
						t.Errorf("wire event %d: %+v, want %s %v", i, ev, w.kind, w.data)
					}
				}
			})
		}
	}
}
