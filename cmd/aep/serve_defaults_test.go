package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
)

// builtinCapabilities is every capability the README lists; docs/DECISIONS.md
// (Plugins and configuration): with no config, `aep serve` runs every
// built-in capability.
var builtinCapabilities = []string{"session", "tools", "toolkits", "memory", "env", "proc", "learn", "skills", "chains", "mcp", "subagents"}

// TestServeDefaults runs `aep serve --stdio` with neither --data-dir nor a
// plugins list (no config at all, and a config without `plugins`): every
// built-in capability is enabled, and the store and the audit log land in
// ./aep-data of the working directory ( --data-dir defaults to
// ./aep-data; audit on by default at <data-dir>/audit.jsonl).
func TestServeDefaults(t *testing.T) {
	tests := []struct {
		name   string
		config string // written to aep.yaml and passed with --config when set
	}{
		{"no config", ""},
		{"config without plugins", "server:\n  max_parallel: 2\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cwd := t.TempDir()
			args := []string{"serve", "--stdio"}
			if tc.config != "" {
				cfg := filepath.Join(cwd, "aep.yaml")
				if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", cfg)
			}
			cmd := exec.Command(bin, args...)
			cmd.Dir = cwd
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "AEP_AUTH_TOKEN=" + token}
			stderr := &lockedBuffer{}
			cmd.Stderr = stderr
			conn, err := client.SpawnStdio(cmd)
			if err != nil {
				t.Fatal(err)
			}
			c := client.New(client.Lines(conn, nil))
			defer func() {
				c.Close()
				if t.Failed() {
					t.Logf("host stderr:\n%s", stderr)
				}
			}()
			resp, err := c.Handshake(ctx, "defaults", token, builtinCapabilities...)
			if err != nil || !resp.Ok {
				t.Fatalf("handshake: %+v %v", resp, err)
			}
			if len(resp.AcceptedCaps) != len(builtinCapabilities) {
				t.Fatalf("accepted_caps %+v", resp.AcceptedCaps)
			}
			for i, ac := range resp.AcceptedCaps {
				if ac.Name != builtinCapabilities[i] || !ac.Enabled {
					t.Errorf("capability %q: %+v, want it enabled", builtinCapabilities[i], ac)
				}
			}
			if tc.config != "" && resp.MaxParallel != 2 {
				t.Errorf("max_parallel %d: the config was not read", resp.MaxParallel)
			}
			// One request of a capability plugin, so the audit log has a line.
			if _, err := c.ToolList(ctx, &msg.ToolListReq{}); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-conn.Exited():
			case <-ctx.Done():
				t.Fatal("host still running after Close")
			}
			for _, f := range []string{"aep.db", "audit.jsonl"} {
				st, err := os.Stat(filepath.Join(cwd, "aep-data", f))
				if err != nil || st.Size() == 0 {
					t.Errorf("./aep-data/%s: %v", f, err)
				}
			}
		})
	}
}
