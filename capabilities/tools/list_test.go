package tools_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/toolrun"
)

func TestListFilters(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	ctx := context.Background()
	cases := []struct {
		name string
		req  msg.ToolListReq
		want string
	}{
		{"default hides deferred", msg.ToolListReq{}, "big,boom,echo,fail,glob,grep,list_dir,read_file,run_command,shout,sleep,steps,write_file"},
		{"query name and description, case-insensitive", msg.ToolListReq{Query: aeptest.Ptr("ECHO")}, "echo,shout"},
		{"query name only", msg.ToolListReq{Query: aeptest.Ptr("ShOuT")}, "shout"},
		{"query description", msg.ToolListReq{Query: aeptest.Ptr("upper case")}, "shout"},
		{"query tag", msg.ToolListReq{Query: aeptest.Ptr("demo")}, "echo"},
		{"query misses deferred", msg.ToolListReq{Query: aeptest.Ptr("semantic")}, ""},
		{"include_deferred finds deferred", msg.ToolListReq{Query: aeptest.Ptr("semantic"), IncludeDeferred: true}, "secret_search"},
		{"include_deferred lists all", msg.ToolListReq{IncludeDeferred: true, Tags: []string{"search"}}, "glob,grep,secret_search"},
		{"one tag", msg.ToolListReq{Tags: []string{"text"}}, "echo,shout"},
		{"tags any-of", msg.ToolListReq{Tags: []string{"slow", "danger"}}, "boom,sleep"},
		{"tag and query", msg.ToolListReq{Tags: []string{"text"}, Query: aeptest.Ptr("upper")}, "shout"},
		{"tag and query, no match", msg.ToolListReq{Tags: []string{"slow"}, Query: aeptest.Ptr("echo")}, ""},
		{"tags from both plugins", msg.ToolListReq{Tags: []string{"file", "text"}, Query: aeptest.Ptr("e")}, "echo,glob,grep,list_dir,read_file,shout,write_file"},
		{"unknown tag", msg.ToolListReq{Tags: []string{"nope"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			resp, err := e.c.ListTools(ctx, &req)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(resp.Tools); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestListDefinitionFields(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	resp, err := e.c.ListTools(context.Background(), &msg.ToolListReq{Query: aeptest.Ptr("echo the")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Tools) != 1 {
		t.Fatalf("got %v", names(resp.Tools))
	}
	d := resp.Tools[0]
	if !d.Idempotent || d.Version == "" || d.DeferLoading || d.Toolkit != nil {
		t.Fatalf("definition %+v", d)
	}
	if len(d.InputParameters) != 2 || d.InputParameters[0].Name != "text" || !*d.InputParameters[0].Required || d.InputParameters[0].Type != "string" ||
		*d.InputParameters[0].Description != "Text to echo." || d.InputParameters[1].Name != "times" || *d.InputParameters[1].Required {
		t.Fatalf("input parameters %+v", d.InputParameters)
	}
	props, _ := d.InputSchema["properties"].(map[string]any)
	if d.InputSchema["type"] != "object" || props["times"].(map[string]any)["type"] != "integer" {
		t.Fatalf("input schema %v", d.InputSchema)
	}
	if len(d.OutputParameters) != 1 || d.OutputParameters[0].Name != "text" {
		t.Fatalf("output parameters %+v", d.OutputParameters)
	}
}

func TestListPagination(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	ctx := context.Background()
	all, err := e.c.ListTools(ctx, &msg.ToolListReq{IncludeDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 2, 3, 5, 100} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var got []msg.ToolDefinition
			req := &msg.ToolListReq{IncludeDeferred: true, Limit: aeptest.Ptr(limit)}
			for pages := 0; ; pages++ {
				if pages > 50 {
					t.Fatal("pagination does not end")
				}
				resp, err := e.c.ListTools(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Tools) > limit {
					t.Fatalf("page of %d over limit %d", len(resp.Tools), limit)
				}
				got = append(got, resp.Tools...)
				if resp.NextCursor == nil {
					break
				}
				req.Cursor = resp.NextCursor
			}
			if names(got) != names(all.Tools) {
				t.Fatalf("pages gave %s\nwant %s", names(got), names(all.Tools))
			}
		})
	}
	// One plugin's page on the wire is exact: limit tools and a cursor.
	r := toolrun.NewRegistry()
	for _, n := range []string{"a", "b", "c"} {
		if err := toolrun.Register(r, n, n, echo); err != nil {
			t.Fatal(err)
		}
	}
	resp := r.List(&msg.ToolListReq{Limit: aeptest.Ptr(2)}, toolrun.Options{})
	if names(resp.Tools) != "a,b" || resp.NextCursor == nil || *resp.NextCursor != "b" {
		t.Fatalf("got %s %v", names(resp.Tools), resp.NextCursor)
	}
	resp = r.List(&msg.ToolListReq{Limit: aeptest.Ptr(2), Cursor: resp.NextCursor}, toolrun.Options{})
	if names(resp.Tools) != "c" || resp.NextCursor != nil {
		t.Fatalf("got %s %v", names(resp.Tools), resp.NextCursor)
	}
}

func TestListMergesPlugins(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	// The raw reply holds both plugins' tools.
	resp, err := e.c.ToolList(context.Background(), &msg.ToolListReq{})
	if err != nil {
		t.Fatal(err)
	}
	got := "," + names(resp.Tools) + ","
	for _, n := range []string{"read_file", "run_command", "echo", "steps"} {
		if !strings.Contains(got, ","+n+",") {
			t.Fatalf("%s missing from merged list %s", n, got)
		}
	}
	if len(resp.Tools) != 13 {
		t.Fatalf("got %d tools: %s", len(resp.Tools), got)
	}
}

func TestDuplicateToolNameRefused(t *testing.T) {
	r1, r2 := toolrun.NewRegistry(), toolrun.NewRegistry()
	toolrun.Register(r1, "same", "", echo)
	toolrun.Register(r2, "same", "", echo)
	_, err := server.New(context.Background(), aeptest.Config(nil),
		server.WithPlugin(server.PluginSpec{Name: "a", Type: "tools", Impl: tools.NewPlugin(r1)}),
		server.WithPlugin(server.PluginSpec{Name: "b", Type: "tools", Impl: tools.NewPlugin(r2)}))
	if !errors.Is(err, server.ErrClaimed) {
		t.Fatalf("got %v, want ErrClaimed", err)
	}
}

// TestWirePagesAcrossPlugins walks tool/list pages on the wire, without any
// client-side help: the kernel must make every page exact although two
// plugins each answer with their own page (x-aep-merge with key and limit).
func TestWirePagesAcrossPlugins(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 5, 100} {
		e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
		all, err := e.c.ToolList(context.Background(), &msg.ToolListReq{})
		if err != nil {
			t.Fatal(err)
		}
		var walked []string
		var cursor *string
		for page := 0; ; page++ {
			if page > 50 {
				t.Fatal("pages never end")
			}
			resp, err := e.c.ToolList(context.Background(), &msg.ToolListReq{Limit: &limit, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Tools) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(resp.Tools))
			}
			for _, td := range resp.Tools {
				walked = append(walked, td.Name)
			}
			if resp.NextCursor == nil {
				break
			}
			cursor = resp.NextCursor
		}
		if got, want := strings.Join(walked, ","), names(all.Tools); got != want {
			t.Fatalf("limit %d: pages give\n%s\nwant\n%s", limit, got, want)
		}
	}
}

// TestDeferPolicy: server.tool_policy's defer patterns (names and tags)
// mark the tools they match defer_loading (spec §2.5), so tool/list leaves
// them out unless include_deferred; a deferred tool stays callable by name.
func TestDeferPolicy(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{Defer: []string{"run_command", "tag:text"}}, 0)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		req      msg.ToolListReq
		want     string
		deferred string // the listed tools with defer_loading true
	}{
		{"default list", msg.ToolListReq{}, "big,boom,fail,glob,grep,list_dir,read_file,sleep,steps,write_file", ""},
		{"include_deferred", msg.ToolListReq{IncludeDeferred: true},
			"big,boom,echo,fail,glob,grep,list_dir,read_file,run_command,secret_search,shout,sleep,steps,write_file", "echo,run_command,secret_search,shout"},
		{"query without include_deferred", msg.ToolListReq{Query: aeptest.Ptr("upper")}, "", ""},
		{"query with include_deferred", msg.ToolListReq{Query: aeptest.Ptr("upper"), IncludeDeferred: true}, "shout", "shout"},
		{"tag with include_deferred", msg.ToolListReq{Tags: []string{"text"}, IncludeDeferred: true}, "echo,shout", "echo,shout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			resp, err := e.c.ToolList(ctx, &req)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(resp.Tools); got != tc.want {
				t.Fatalf("listed %q, want %q", got, tc.want)
			}
			var deferred []msg.ToolDefinition
			for _, d := range resp.Tools {
				if d.DeferLoading {
					deferred = append(deferred, d)
				}
			}
			if got := names(deferred); got != tc.deferred {
				t.Fatalf("deferred %q, want %q", got, tc.deferred)
			}
		})
	}
	r, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || !r.Success {
		t.Fatalf("call of a deferred tool: %+v %v", r, err)
	}
}
