package aepbin_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
)

// forModesHTTP is forModes with the host serving HTTP and WebSocket, for
// tests of several sessions.
func forModesHTTP(t *testing.T, caps []string, fn func(t *testing.T, h *aepbin.Host)) {
	for _, m := range hostModes {
		t.Run(m.name, func(t *testing.T) {
			o := m.opts
			o.HTTP, o.Caps = true, caps
			h := aepbin.Start(t, o)
			if got := h.Tier(); got == "" || m.tier != "" && got != m.tier {
				t.Fatalf("the host picked tier %q, want %q", got, m.tier)
			}
			fn(t, h)
		})
	}
}

// TestSessionsCannotReachEachOther: in every host mode, session B cannot
// read, list or overwrite the files session A wrote, through the tools or
// through a command it runs, even knowing A's public handle.
func TestSessionsCannotReachEachOther(t *testing.T) {
	caps := []string{"tools", "proc", "session"}
	forModesHTTP(t, caps, func(t *testing.T, h *aepbin.Host) {
		a := h.Client
		b := h.Connect(t, "", aepbin.Token, caps...)
		info, err := a.Request(ctx(t), &msg.SessionInfoReq{})
		if err != nil {
			t.Fatal(err)
		}
		handleA := info.(*msg.SessionInfoResp).Handle
		write := func(c *client.Client, content string) {
			t.Helper()
			res, err := c.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": "secret.txt", "content": content}})
			if err != nil || !res.Success {
				t.Fatalf("write_file: %+v %v", res, err)
			}
		}
		write(a, "only-for-a-7c21")
		// Through the tools.
		res, err := b.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": "secret.txt"}})
		if err == nil && res.Success {
			t.Fatalf("B read A's file: %+v", res)
		}
		for _, p := range []string{"../" + handleA + "/secret.txt", "../../sessions/" + handleA + "/secret.txt"} {
			res, err := b.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": p}})
			if err == nil && res.Success {
				t.Fatalf("B read A's file as %s: %+v", p, res)
			}
		}
		// Through a command, by every path it could guess.
		out := runCommand(t, b, `cat "$HOME/../`+handleA+`/secret.txt" ../`+handleA+`/secret.txt /workspace/../`+handleA+`/secret.txt `+
			h.DataDir+`/sessions/`+handleA+`/secret.txt 2>&1; find "$HOME/.." /workspace/.. /tmp `+h.DataDir+` -maxdepth 4 -name secret.txt 2>/dev/null | xargs cat 2>&1`)
		if strings.Contains(out, "only-for-a-7c21") {
			t.Fatalf("B's command reached A's files: %s", out)
		}
		if out := runCommand(t, b, `ls .. "$HOME/.." `+h.DataDir+`/sessions 2>/dev/null`); strings.Contains(out, handleA) {
			t.Fatalf("B's command listed A's directory: %s", out)
		}
		spawned := output(t, b, spawn(t, b, "sh", "-c", `cat "$HOME/../`+handleA+`/secret.txt" `+h.DataDir+`/sessions/`+handleA+`/secret.txt 2>&1`).ProcID)
		if strings.Contains(spawned, "only-for-a-7c21") {
			t.Fatalf("B's process read A's file: %s", spawned)
		}
		// B's own file of the same name leaves A's alone.
		write(b, "b-wrote-this")
		res, err = a.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": "secret.txt"}})
		if err != nil || !res.Success || !strings.Contains(toolText(res), "only-for-a-7c21") {
			t.Fatalf("A's file after B wrote its own: %+v %v", res, err)
		}
	})
}

// toolText is a tool result's data as text.
func toolText(r *msg.ToolResult) string { return fmt.Sprint(r.Data) }

// TestDataPlaneScopesInEveryTier: in every host mode, with the default
// configuration, env/data/* of a subagent follows its memory scope
// (docs/DECISIONS.md, Isolation): shared reads and adds to its parent's
// data and may not reset it; restricted reads it and may neither add nor
// reset; isolated has its own; snapshot has a copy made at spawn.
func TestDataPlaneScopesInEveryTier(t *testing.T) {
	caps := []string{"env", "subagents", "memory"}
	forModesHTTP(t, caps, func(t *testing.T, h *aepbin.Host) {
		staging := filepath.Join(h.DataDir, "aep.env.builtin", "staging") // named by module
		p := h.Client
		for _, tc := range []struct {
			scope                    string
			sees                     []string
			addRefused, resetRefused string
			parentSees               bool
		}{
			{"shared", []string{"before.txt", "later.txt"}, "", "shares its parent's data root", true},
			{"restricted", []string{"before.txt", "later.txt"}, "read-only for a restricted subagent", "read-only for a restricted subagent", false},
			{"isolated", nil, "", "", false},
			{"snapshot", []string{"before.txt"}, "", "", false},
		} {
			t.Run(tc.scope, func(t *testing.T) {
				add := func(c *client.Client, name string) error {
					body := "content of " + name
					if err := os.WriteFile(filepath.Join(staging, name), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
					sum := sha256.Sum256([]byte(body))
					_, err := c.EnvDataAdd(ctx(t), &msg.EnvDataAddReq{Parts: []msg.DataPart{{Path: name, Source: name, Size: len(body), Sha256: hex.EncodeToString(sum[:])}}})
					return err
				}
				// The parent starts each case from its baseline (empty).
				if _, err := p.EnvDataReset(ctx(t), &msg.EnvDataResetReq{}); err != nil {
					t.Fatal(err)
				}
				if err := add(p, "before.txt"); err != nil {
					t.Fatal(err)
				}
				r, err := p.SubagentSpawn(ctx(t), &msg.SubagentSpawnReq{Name: "w-" + tc.scope, MemoryScope: msg.SubagentSpawnReqMemoryScope(tc.scope)})
				if err != nil {
					t.Fatal(err)
				}
				if err := add(p, "later.txt"); err != nil {
					t.Fatal(err)
				}
				c := h.Connect(t, r.SessionID, r.AuthToken, "env")
				got := get(t, c)
				if len(got) != len(tc.sees) {
					t.Fatalf("the child lists %v, want %v", got, tc.sees)
				}
				for _, f := range tc.sees {
					if got[f] != "content of "+f {
						t.Fatalf("the child lists %v, want %v", got, tc.sees)
					}
				}
				err = add(c, "child-"+tc.scope+".txt")
				switch {
				case tc.addRefused != "" && (err == nil || !strings.Contains(err.Error(), tc.addRefused)):
					t.Fatalf("the child's add: %v, want it refused (%s)", err, tc.addRefused)
				case tc.addRefused == "" && err != nil:
					t.Fatalf("the child's add: %v", err)
				}
				if _, seen := get(t, p)["child-"+tc.scope+".txt"]; seen != tc.parentSees {
					t.Fatalf("the parent sees the child's file: %v, want %v", seen, tc.parentSees)
				}
				_, err = c.EnvDataReset(ctx(t), &msg.EnvDataResetReq{})
				switch {
				case tc.resetRefused != "" && (err == nil || !strings.Contains(err.Error(), tc.resetRefused)):
					t.Fatalf("the child's reset: %v, want it refused (%s)", err, tc.resetRefused)
				case tc.resetRefused == "" && err != nil:
					t.Fatalf("the child's reset: %v", err)
				case tc.resetRefused == "" && len(get(t, c)) != 0:
					t.Fatalf("the child's data after its reset: %v", get(t, c))
				}
				if got := get(t, p); got["before.txt"] != "content of before.txt" || got["later.txt"] != "content of later.txt" {
					t.Fatalf("the parent's data after the child's calls: %v", got)
				}
			})
		}
	})
}
