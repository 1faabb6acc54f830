package aepbin_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
)

// TestDataPlaneDefaultConfiguration: with `aep serve` and no config file,
// env/data/add stages a file into the session's data root, write_file
// changes it (the tools workspace and the data root are one session
// directory), env/data/get reads the change, a contained process reads it
// at $HOME/data (/workspace/data in tier a), and env/data/reset brings
// the operator's baseline back.
func TestDataPlaneDefaultConfiguration(t *testing.T) {
	forModes(t, func(t *testing.T, h *aepbin.Host) {
		own := filepath.Join(h.DataDir, "aep.env.builtin") // named by module (docs/DECISIONS.md)
		put := func(dir, name, body string) {
			if err := os.WriteFile(filepath.Join(own, dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		put("staging", "a.txt", "staged")
		put("baseline", "b.txt", "baseline")
		sum := sha256.Sum256([]byte("staged"))
		if _, err := h.Client.EnvDataAdd(ctx(t), &msg.EnvDataAddReq{Parts: []msg.DataPart{{Path: "a.txt", Source: "a.txt", Size: 6, Sha256: hex.EncodeToString(sum[:])}}}); err != nil {
			t.Fatalf("env/data/add: %v", err)
		}
		res, err := h.Client.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": "data/a.txt", "content": "changed by write_file"}})
		if err != nil || !res.Success {
			t.Fatalf("write_file: %+v %v", res, err)
		}
		if got := get(t, h.Client)["a.txt"]; got != "changed by write_file" {
			t.Fatalf("env/data/get reads %q", got)
		}
		if out := output(t, h.Client, spawn(t, h.Client, "sh", "-c", `cat "$HOME/data/a.txt"`).ProcID); out != "changed by write_file" {
			t.Fatalf("a contained process reads %q", out)
		}
		r, err := h.Client.EnvDataReset(ctx(t), &msg.EnvDataResetReq{})
		if err != nil {
			t.Fatalf("env/data/reset: %v", err)
		}
		if got := get(t, h.Client); r.Restored != 1 || len(got) != 1 || got["b.txt"] != "baseline" {
			t.Fatalf("after env/data/reset (restored %d): %v", r.Restored, got)
		}
		if out := runCommand(t, h.Client, `ls "$HOME/data"`); !strings.Contains(out, "b.txt") || strings.Contains(out, "a.txt") {
			t.Fatalf("run_command lists %s", out)
		}
	})
}

func get(t *testing.T, c *client.Client) map[string]string {
	t.Helper()
	r, err := c.EnvDataGet(ctx(t), &msg.EnvDataGetReq{Inline: true})
	if err != nil {
		t.Fatalf("env/data/get: %v", err)
	}
	out := map[string]string{}
	for _, f := range r.Files {
		if f.Content != nil {
			out[f.Path] = *f.Content
		}
	}
	return out
}
