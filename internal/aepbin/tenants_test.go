package aepbin_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/wire"
)

// Tenants (docs/DECISIONS.md, Tenants) with the real binary over HTTP
// (single exchange) and WebSocket: two tenants with their own capability
// sets, budgets and session totals, enforced independently; a secret
// rotated with a SIGHUP, no restart.

const (
	secretA  = "tenant-a-secret-only-4b1c"
	secretB  = "tenant-b-secret-first-77aa"
	secretB2 = "tenant-b-secret-second-9d2e"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func tenantsConfig(bHashes ...string) string {
	return fmt.Sprintf(`server:
  budgets:
    leaf_wait: 1s
  tenants:
    - name: team-a
      secret_sha256: ["%s"]
      capabilities: [tools]
      budgets:
        leaf_work: 1
      totals:
        sessions: 2
    - name: team-b
      secret_sha256: [%s]
      capabilities: [tools, memory]
      budgets:
        leaf_work: 4
`, sha(secretA), `"`+strings.Join(bHashes, `", "`)+`"`)
}

// exchange opens a session on the single exchange (HTTP) and handshakes
// it with token; a refused handshake is returned as the reply.
func exchange(t *testing.T, h *aepbin.Host, token string, caps ...string) (*client.Client, *msg.HandshakeResp) {
	t.Helper()
	c, err := client.SingleExchange(ctx(t), h.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hs, err := c.Handshake(ctx(t), "tenant-agent", token, caps...)
	if err != nil {
		var we *wire.Error
		if hs == nil && !errorsAs(err, &we) {
			t.Fatalf("handshake: %v", err)
		}
	}
	return c, hs
}

func errorsAs(err error, we **wire.Error) bool {
	e, ok := err.(*wire.Error)
	if ok {
		*we = e
	}
	return ok
}

func enabled(hs *msg.HandshakeResp, name string) bool {
	for _, c := range hs.AcceptedCaps {
		if c.Name == name {
			return c.Enabled
		}
	}
	return false
}

func TestTenantsOverHTTPAndWebSocket(t *testing.T) {
	h := aepbin.Start(t, aepbin.Options{HTTP: true, Caps: []string{"tools"}, Config: tenantsConfig(sha(secretB))})
	// Capabilities: team-a may not have memory, team-b may.
	a := h.Connect(t, "", secretA, "tools", "memory") // WebSocket
	_, hsA := exchange(t, h, secretA, "tools", "memory")
	if hsA == nil || !hsA.Ok || enabled(hsA, "memory") || !enabled(hsA, "tools") {
		t.Fatalf("team-a's handshake: %+v", hsA)
	}
	if _, err := a.MemoryInit(ctx(t), &msg.MemoryInitReq{}); err == nil {
		t.Fatal("team-a used memory")
	} else if we, ok := err.(*wire.Error); !ok || we.Code != wire.CodeCapabilityMissing {
		t.Fatalf("team-a's memory/init: %v", err)
	}
	b, hsB := exchange(t, h, secretB, "tools", "memory")
	if !hsB.Ok || !enabled(hsB, "memory") {
		t.Fatalf("team-b's handshake: %+v", hsB)
	}
	if _, err := b.MemoryInit(ctx(t), &msg.MemoryInitReq{}); err != nil {
		t.Fatalf("team-b's memory/init: %v", err)
	}
	// A session total: team-a has two sessions, a third is refused; team-b
	// is not concerned.
	if _, hs := exchange(t, h, secretA, "tools"); hs.Ok || hs.Error == nil || !strings.Contains(fmt.Sprint(hs.Error.Detail), "tenant_sessions") {
		t.Fatalf("team-a's third session: %+v", hs)
	}
	b2 := h.Connect(t, "", secretB, "tools")
	// Budgets: team-a's one unit of leaf work is taken by a command, so a
	// second is refused after leaf_wait; team-b runs two at once.
	sleep := func(c *client.Client) (*msg.ToolResult, error) {
		return c.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []any{"sleep", "2"}}})
	}
	var wg sync.WaitGroup
	results := make([]error, 4)
	for i, c := range []*client.Client{a, a, b, b2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sleep(c)
			if err == nil && !res.Success {
				err = fmt.Errorf("%s", *res.Error)
			}
			results[i] = err
		}()
	}
	wg.Wait()
	refusedA := 0
	for _, err := range results[:2] {
		if err != nil && strings.Contains(err.Error(), "leaf work") {
			refusedA++
		}
	}
	if refusedA != 1 || results[2] != nil || results[3] != nil {
		t.Fatalf("leaf work: team-a %v, team-b %v", results[:2], results[2:])
	}

	// Rotation: both of team-b's secrets valid, then the old one refused,
	// with no restart; the session the old one opened goes on.
	reload := func(config string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(h.DataDir, "config.yaml"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		before := strings.Count(h.Stderr(), "tenants reloaded")
		if err := h.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); strings.Count(h.Stderr(), "tenants reloaded") == before; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no reload logged:\n%s", h.Stderr())
			}
		}
	}
	reload(tenantsConfig(sha(secretB), sha(secretB2)))
	for _, secret := range []string{secretB, secretB2} {
		if _, hs := exchange(t, h, secret, "tools"); !hs.Ok {
			t.Fatalf("%s during the rotation: %+v", secret, hs)
		}
	}
	reload(tenantsConfig(sha(secretB2)))
	if _, hs := exchange(t, h, secretB, "tools"); hs.Ok || hs.Error.Code != string(wire.CodeUnauthorized) {
		t.Fatalf("the old secret after the rotation: %+v", hs)
	}
	if _, hs := exchange(t, h, secretB2, "tools"); !hs.Ok {
		t.Fatalf("the new secret after the rotation: %+v", hs)
	}
	if _, err := b.MemoryInit(ctx(t), &msg.MemoryInitReq{}); err != nil {
		t.Fatalf("the session the old secret opened, after the rotation: %v", err)
	}
	if _, err := h.Client.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{}}); err != nil {
		t.Fatalf("the default tenant's session after the reload: %v", err)
	}
	if pid := h.Cmd.Process.Pid; pid == 0 || h.Cmd.ProcessState != nil {
		t.Fatal("the host restarted")
	}
}
