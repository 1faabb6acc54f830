package server

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// rawState is a snapshotter whose per-session state a test sets directly.
type rawState struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (p *rawState) Snapshot(ctx context.Context, sid string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[sid], nil
}

func (p *rawState) Restore(ctx context.Context, sid string, state []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[sid] = state
	return nil
}

// TestSnapshotRefusesChildToken: a child session handshakes with its own
// token, which the kernel also keeps out of snapshots.
func TestSnapshotRefusesChildToken(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Defaults()
	cfg.Server.AuthToken = "host-token-canary"
	plug := &rawState{m: map[string][]byte{}}
	h, err := New(ctx, cfg, WithDataDir(dir), WithPlugin(PluginSpec{Name: "raw", Impl: plug}))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	handshake := func(s *Session, token string) {
		t.Helper()
		s.handshake(&wire.Envelope{Type: "handshake/req", ID: wire.NewID(), Proto: wire.ProtoVersion}, &msg.HandshakeReq{AgentID: "a", AuthToken: token})
		if !s.Live() {
			t.Fatal("handshake failed")
		}
	}
	parent, err := h.NewSession(nil)
	if err != nil {
		t.Fatal(err)
	}
	handshake(parent, "host-token-canary")
	const childToken = "child-token-canary"
	sum := sha256.Sum256([]byte(childToken))
	child, err := h.newSession(nil, parent, &sum, nil)
	if err != nil {
		t.Fatal(err)
	}
	handshake(child, childToken)

	tests := []struct {
		name  string
		s     *Session
		state string
		want  string // "" means the snapshot is written
	}{
		{"child token in child state", child, "x" + childToken + "x", "the session's auth token"},
		{"host token in child state", child, `{"t":"host-token-canary"}`, "the host auth token"},
		{"child token in parent state is the child's business", parent, childToken, ""},
		{"clean child state", child, "clean", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plug.m[tc.s.handle] = []byte(tc.state)
			resp, err := h.persist.SessionSnapshot(ctx, tc.s.view(), &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTargetFile})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(dir, "snapshots", resp.SnapshotID+".json")); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "canary") {
				t.Fatalf("got %v", err)
			}
		})
	}
	child.Close()
	<-child.Done()
	if _, ok := h.sessionTokens.Load(child.id); ok {
		t.Fatal("the child's token outlived its session")
	}
}

func (*rawState) Module() ModuleInfo { return ModuleInfo{ID: "test.rawstate"} }
