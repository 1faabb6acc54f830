package toolkits_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/gen/msg"
)

// TestPostgresWrongPasswordLeavesNoTrace checks "a wrong password
// → status: error with no password in any output" against a real
// PostgreSQL server that rejects the password (TestSecretsNeverLeak covers
// a backend that cannot be reached at all): the canary is in no reply, no
// log line (debug level), no audit line and no snapshot, and the toolkit
// stays unconfigured.
func TestPostgresWrongPasswordLeavesNoTrace(t *testing.T) {
	needPostgres(t)
	e := newEnv(t)
	ctx := context.Background()
	r, err := e.c.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: map[string]any{
		"driver": "postgres", "database": "postgres", "host": "127.0.0.1", "port": 5432, "user": "postgres",
		"password": canary, "mode": "read_only"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "error" || !strings.Contains(r.Message, "backend") {
		t.Fatalf("wrong password: %+v", r)
	}
	if !strings.Contains(r.Message, "password") {
		t.Fatalf("the reason is missing from %q", r.Message)
	}
	replies := []string{encode(r)}
	def, err := e.c.GetToolkit(ctx, "sql")
	if err != nil || def.Configured || def.State != "installed" {
		t.Fatalf("toolkit after a failed configure: %+v %v", def, err)
	}
	replies = append(replies, encode(def))
	snap, err := e.c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.audit.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, reply := range replies {
		if strings.Contains(reply, canary) {
			t.Fatalf("canary in a reply: %s", reply)
		}
	}
	if strings.Contains(e.logs.String(), canary) {
		t.Fatal("canary in the logs")
	}
	if !strings.Contains(e.logs.String(), "snapshot written") {
		t.Fatalf("the log captured nothing, so the check above is empty: %s", e.logs.String())
	}
	snapFound, auditFound := false, false
	filepath.Walk(e.data, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		snapFound = snapFound || strings.Contains(p, snap.SnapshotID)
		auditFound = auditFound || (p == e.auditLog && bytes.Contains(b, []byte("toolkit/configure/req")))
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("canary in %s", p)
		}
		return nil
	})
	if !snapFound || !auditFound {
		t.Fatalf("snapshot found %v, audit line found %v", snapFound, auditFound)
	}
}
