package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/server"
)

// TestAuditFullDiskTearsNoLine: on a file system that fills up, the audit
// file holds whole lines only — a write cut short is taken back — and the
// failures are counted (docs/SECURITY.md, Budgets). The disk is a tmpfs of
// 64 KiB mounted by the test (root only).
func TestAuditFullDiskTearsNoLine(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root to mount a small tmpfs")
		}
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	path := filepath.Join(dir, "audit.jsonl")
	a := server.NewFileAuditor(path, 10, 1, nil)
	for i := 0; i < 3000; i++ {
		a.Record(server.AuditRecord{TS: time.Now(), SessionID: "h-" + strings.Repeat("x", 32), ReqID: strings.Repeat("r", 40), Type: "tool/call/req", Success: true})
		if i%50 == 0 {
			time.Sleep(2 * time.Millisecond) // batches of a few lines each
		}
	}
	if err := a.Close(context.Background()); err != nil {
		t.Logf("close: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 32<<10 {
		t.Fatalf("the audit file holds %d bytes: the disk never filled, so the test proves nothing", len(b))
	}
	if a.Failures() == 0 {
		t.Fatal("no write failed: the disk never filled")
	}
	if !bytes.HasSuffix(b, []byte("\n")) {
		t.Fatalf("the file ends in a torn line: %q", b[max(0, len(b)-80):])
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	lines := 0
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d is torn: %q", lines+1, sc.Text())
		}
		lines++
	}
	t.Logf("%d whole lines, %d failed writes", lines, a.Failures())
}
