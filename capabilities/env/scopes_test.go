package env_test

import (
	"testing"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/capabilities/subagents"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// dataFiles is what env/data/get lists for c: path → content.
func dataFiles(t *testing.T, c *client.Client) map[string]string {
	t.Helper()
	r, err := c.EnvDataGet(aeptest.Context(t), &msg.EnvDataGetReq{Inline: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range r.Files {
		if f.Content != nil {
			out[f.Path] = *f.Content
		}
	}
	return out
}

// TestDataPlaneScopes: env/data/* of a subagent follows its memory scope
// (docs/DECISIONS.md, Isolation): shared reads and adds to its parent's
// data and may not reset it; restricted reads it and may neither add nor
// reset; isolated has its own; snapshot has a copy made at spawn.
func TestDataPlaneScopes(t *testing.T) {
	for _, tc := range []struct {
		scope string
		// What the child lists after the parent added later.txt past the spawn.
		sees []string
		// What the error of a refused add and reset says ("" allowed).
		addRefused, resetRefused string
		// Whether the parent sees the child's added file.
		parentSees bool
	}{
		{"shared", []string{"before.txt", "later.txt"}, "", "shares its parent's data root", true},
		{"restricted", []string{"before.txt", "later.txt"}, "read-only for a restricted subagent", "read-only for a restricted subagent", false},
		{"isolated", nil, "", "", false},
		{"snapshot", []string{"before.txt"}, "", "", false},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			staging, baseline := t.TempDir(), t.TempDir()
			h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
				aeptest.Plugin("env", &env.Plugin{Settings: env.Settings{DataRoot: env.DefaultDataRoot, StagingRoot: staging, BaselineDir: baseline}}),
				aeptest.Plugin("memory", &memory.Plugin{}),
				aeptest.Plugin("subagents", &subagents.Plugin{}),
			}, server.WithDataDir(t.TempDir()))
			p := aeptest.Connect(t, h, "env", "subagents", "memory")
			ctx := aeptest.Context(t)
			add := func(c *client.Client, name string) error {
				_, err := c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: []msg.DataPart{stage(t, staging, name, "content of "+name)}})
				return err
			}
			if err := add(p, "before.txt"); err != nil {
				t.Fatal(err)
			}
			r, err := p.SubagentSpawn(ctx, &msg.SubagentSpawnReq{Name: "w", MemoryScope: msg.SubagentSpawnReqMemoryScope(tc.scope)})
			if err != nil {
				t.Fatal(err)
			}
			if err := add(p, "later.txt"); err != nil {
				t.Fatal(err)
			}
			conn, err := h.ConnectLinesTo(r.SessionID, 64)
			if err != nil {
				t.Fatal(err)
			}
			c := client.New(client.Lines(conn, nil))
			t.Cleanup(func() { c.Close() })
			if _, err := c.Handshake(ctx, "w", r.AuthToken, "env"); err != nil {
				t.Fatal(err)
			}
			got := dataFiles(t, c)
			if len(got) != len(tc.sees) {
				t.Fatalf("the child lists %v, want %v", got, tc.sees)
			}
			for _, f := range tc.sees {
				if got[f] != "content of "+f {
					t.Fatalf("the child lists %v, want %v", got, tc.sees)
				}
			}
			err = add(c, "child.txt")
			if tc.addRefused != "" {
				aeptest.WantError(t, err, wire.CodeRuntimeError, tc.addRefused)
			} else if err != nil {
				t.Fatalf("the child's add: %v", err)
			}
			if _, seen := dataFiles(t, p)["child.txt"]; seen != tc.parentSees {
				t.Fatalf("the parent sees the child's file: %v, want %v", seen, tc.parentSees)
			}
			_, err = c.EnvDataReset(ctx, &msg.EnvDataResetReq{})
			if tc.resetRefused != "" {
				we := aeptest.WantError(t, err, wire.CodeRuntimeError, tc.resetRefused)
				t.Logf("refused reset says: %s", we.Message)
			} else if err != nil {
				t.Fatalf("the child's reset: %v", err)
			} else if n := len(dataFiles(t, c)); n != 0 {
				t.Fatalf("the child's data after its reset: %d files", n)
			}
			// Whatever the child did, the parent's own files are intact.
			if got := dataFiles(t, p); got["before.txt"] != "content of before.txt" || got["later.txt"] != "content of later.txt" {
				t.Fatalf("the parent's data after the child's calls: %v", got)
			}
		})
	}
}
