package chains_test

import (
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/chains"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Stored chains are part of the session's snapshot: a restore into another
// session brings them back under their names, replaces what that session
// had defined, and they run there as they did before.
func TestSnapshotRestoresStoredChains(t *testing.T) {
	e := newEnv(t, envOpts{})
	define := func(c *client.Client, name, chain string) {
		t.Helper()
		var d msg.ChainDefinition
		if err := wire.Unmarshal([]byte(chain), &d); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ChainDefine(aeptest.Context(t), &msg.ChainDefineReq{Name: name, Chain: d}); err != nil {
			t.Fatalf("define %s: %v", name, err)
		}
	}
	runText := func(c *client.Client, name string) (string, error) {
		t.Helper()
		r, err := c.ChainRun(aeptest.Context(t), runReq(t, `{"name":"`+name+`","input":{"word":"hey"}}`))
		if err != nil {
			return "", err
		}
		if !r.Success {
			t.Fatalf("run %s: %s", name, encode(t, r))
		}
		var out struct{ Text string }
		if err := wire.Unmarshal(r.FinalOutput, &out); err != nil {
			t.Fatal(err)
		}
		return out.Text, nil
	}
	define(e.c, "shout", `{"nodes":[{"id":"s","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{input.word}}","mode":"upper"}}}]}`)
	define(e.c, "plain", `{"nodes":[{"id":"s","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{input.word}}"}}}]}`)
	snap, err := e.c.SessionSnapshot(aeptest.Context(t), &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}

	other := aeptest.Connect(t, e.h, "chains", "echo")
	define(other, "mine", `{"nodes":[{"id":"g","kind":"gather"}]}`)
	if _, err := other.SessionRestore(aeptest.Context(t), &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"shout": "HEY", "plain": "hey"} {
		if got, err := runText(other, name); err != nil || got != want {
			t.Errorf("restored chain %s says %q (%v), want %q", name, got, err, want)
		}
	}
	_, err = runText(other, "mine")
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
	// The first session still has its chains: a snapshot copies, it does not move.
	if got, err := runText(e.c, "shout"); err != nil || got != "HEY" {
		t.Errorf("original session after snapshot: %q %v", got, err)
	}
}

// A chains state that is not what this host wrote is refused with a reason
// and changes nothing.
func TestRestoreRefusesBadState(t *testing.T) {
	ctx := aeptest.Context(t)
	p := &chains.Plugin{}
	if err := p.Provision(ctx, server.PluginEnv{}); err != nil {
		t.Fatal(err)
	}
	good := `{"version":1,"chains":{"g":{"nodes":[{"id":"g","kind":"gather"}]}}}`
	if err := p.Restore(ctx, "s", []byte(good)); err != nil {
		t.Fatal(err)
	}
	before, err := p.Snapshot(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, state, want string }{
		{"not json", `{"version":1,`, "chains state"},
		{"other version", `{"version":2,"chains":{}}`, "version 2"},
		{"unknown field", `{"version":1,"chains":{},"extra":1}`, "extra"},
		{"empty name", `{"version":1,"chains":{"":{"nodes":[{"id":"g","kind":"gather"}]}}}`, `chain ""`},
		{"cycle", `{"version":1,"chains":{"c":{"nodes":[{"id":"a","kind":"gather"},{"id":"b","kind":"gather"}],"edges":[{"from":"a","to":"b"},{"from":"b","to":"a"}]}}}`, `chain "c"`},
		{"unknown type", `{"version":1,"chains":{"u":{"nodes":[{"id":"a","kind":"action","request":{"type":"nope/req","body":{}}}]}}}`, `chain "u"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Restore(ctx, "s", []byte(tc.state))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
			after, _ := p.Snapshot(ctx, "s")
			if string(after) != string(before) {
				t.Fatalf("a refused restore changed the state: %s", after)
			}
		})
	}
}
