package client_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
)

// The process of a StdioConn starts with the first line; a conn closed
// before that, or whose process cannot start, ends cleanly and says why.
func TestStdioConnStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	notExec := filepath.Join(t.TempDir(), "host")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func(t *testing.T) error
	}{
		{"missing command", func(t *testing.T) error {
			_, err := client.SpawnStdio(exec.Command("aep-no-such-command-anywhere"))
			return err
		}},
		{"stdout already set", func(t *testing.T) error {
			cmd := exec.Command("cat")
			cmd.Stdout = io.Discard
			_, err := client.SpawnStdio(cmd)
			return err
		}},
		{"closed before the first line", func(t *testing.T) error {
			cmd := exec.Command("cat")
			conn, err := client.SpawnStdio(cmd)
			if err != nil {
				t.Fatal(err)
			}
			if err := conn.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if cmd.Process != nil {
				t.Fatal("a conn closed before any line started its process")
			}
			<-conn.Exited()
			if _, err := conn.ReadLine(ctx); !errors.Is(err, io.EOF) {
				t.Fatalf("read after close: %v", err)
			}
			return conn.WriteLine(ctx, []byte(`{}`))
		}},
		{"cannot start", func(t *testing.T) error {
			conn, err := client.SpawnStdio(exec.Command(notExec))
			if err != nil {
				t.Fatal(err)
			}
			werr := conn.WriteLine(ctx, []byte(`{"type":"handshake/req","auth_token":"t"}`))
			<-conn.Exited()
			if _, err := conn.ReadLine(ctx); err == nil {
				t.Fatal("read from a process that never started")
			}
			_ = conn.Close()
			return werr
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(t)
			if err == nil || !strings.HasPrefix(err.Error(), "stdio: ") {
				t.Fatalf("want a stdio error, got %v", err)
			}
		})
	}
}
