package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
)

// `aep export trajectories` reads a recorded session from the store of a
// host that has stopped: the records the session made over HTTP, as JSONL
// and as a chat sample, by the handle the logs name it by.
func TestExportTrajectories(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	stderr := &lockedBuffer{}
	serve := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir)
	serve.Env = []string{"AEP_AUTH_TOKEN=" + token, "PATH=/usr/bin:/bin"}
	serve.Stderr = stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer serve.Process.Kill()
	base := ""
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, `msg="HTTP transport serving"`) {
				_, a, _ := strings.Cut(l, "addr=")
				base = "http://" + strings.Fields(a)[0]
			}
		}
	}
	if base == "" {
		t.Fatalf("no address:\n%s", stderr)
	}
	conn, err := client.DialHTTP(ctx, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawSession{t: t, conn: conn}
	hs := r.do(ctx, `{"type":"handshake/req","id":"h1","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["env"],"auth_token":"`+token+`","record_trajectory":true}`)
	if hs["record_trajectory"] != true {
		t.Fatalf("handshake %v", hs)
	}
	reset := r.do(ctx, `{"type":"env/reset/req","id":"r1","proto":"1.0","ts":1,"env_name":"guess","seed":3}`)
	r.do(ctx, `{"type":"env/step/req","id":"s1","proto":"1.0","ts":1,"episode_id":"`+reset["episode_id"].(string)+`","action":50}`)
	info := r.do(ctx, `{"type":"session/info/req","id":"i1","proto":"1.0","ts":1}`)
	handle := info["handle"].(string)
	conn.Close()
	serve.Process.Signal(syscall.SIGTERM)
	serve.Wait()

	for _, tc := range []struct {
		format string
		lines  int
		want   string
	}{
		{"jsonl", 8, `"type":"env/step/resp"`},
		{"chat", 1, `"name":"env_step"`},
	} {
		t.Run(tc.format, func(t *testing.T) {
			var out, errb bytes.Buffer
			cmd := exec.Command(bin, "export", "trajectories", "--session", handle, "--format", tc.format, "--data-dir", dataDir)
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %s", err, errb.String())
			}
			n := 0
			for sc := bufio.NewScanner(bytes.NewReader(out.Bytes())); sc.Scan(); n++ {
				if !json.Valid(sc.Bytes()) {
					t.Fatalf("not JSON: %s", sc.Bytes())
				}
			}
			if n != tc.lines || !strings.Contains(out.String(), tc.want) || strings.Contains(out.String(), token) {
				t.Fatalf("%d lines:\n%s", n, out.String())
			}
		})
	}
	if err := exec.Command(bin, "export", "trajectories", "--session", handle, "--format", "csv", "--data-dir", dataDir).Run(); err == nil {
		t.Fatal("--format csv accepted")
	}
}
