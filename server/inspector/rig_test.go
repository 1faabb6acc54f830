package inspector_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/aephost/aep/capabilities/all"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/server/store"
)

// The secrets a rig plants: each at least server.MinSecretBytes, each
// unlike any other word a page shows.
const (
	hostToken    = "host-token-canary-5d1f0a9c"
	tenantSecret = "tenant-secret-canary-8e2b41"
	// otherSecret is another tenant's: the host holds only its hash.
	otherSecret   = "globex-secret-canary-19f3"
	operatorToken = "operator-token-canary-3c7d"
	password      = "pw-inspector-canary-6a4e"
)

// rig is a host with the built-in capabilities, a store recording every
// trajectory, three tenants (default, by the host token, and acme, by
// tenantSecret; globex, by otherSecret) and its operator listener on loopback.
type rig struct {
	h       *server.Host
	dataDir string
	audit   string
	srv     *httptest.Server
}

var rigCaps = []string{"tools", "memory", "env", "proc", "toolkits"}

func newRig(t testing.TB) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{dataDir: t.TempDir()}
	st, err := store.Open(ctx, "", r.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := aeptest.Config(func(c *server.Config) {
		c.Server.AuthToken = hostToken
		sum := sha256.Sum256([]byte(tenantSecret))
		other := sha256.Sum256([]byte(otherSecret))
		c.Server.Tenants = append(c.Server.Tenants, server.TenantConfig{Name: "acme", SecretSHA256: []string{hex.EncodeToString(sum[:])}},
			server.TenantConfig{Name: "globex", SecretSHA256: []string{hex.EncodeToString(other[:])}})
		c.Server.Trajectories.Record = "all"
		for _, p := range rigCaps {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r.audit = filepath.Join(r.dataDir, "audit.jsonl")
	r.h, err = server.New(ctx, cfg, server.WithDataDir(r.dataDir), server.WithStore(st), server.WithLogger(log),
		server.WithAuditor(server.NewFileAuditor(r.audit, 10, 1, log)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.h.Close(context.Background()) })
	r.srv = httptest.NewServer(httpapi.OperatorHandler(r.h, httpapi.OperatorOptions{Token: operatorToken, Store: st}))
	t.Cleanup(r.srv.Close)
	return r
}

// agent handshakes a scripted agent with token.
func (r *rig) agent(t testing.TB, name, token string) (*client.Client, *server.LinePipe) {
	t.Helper()
	pipe, err := r.h.ConnectLines(256)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Lines(pipe, nil))
	t.Cleanup(func() { c.Close() })
	if hs, err := c.Handshake(aeptest.Context(t), name, token, rigCaps...); err != nil || !hs.Ok {
		t.Fatalf("handshake %+v %v", hs, err)
	}
	return c, pipe
}

// script runs the session the tests look at: tool calls, a command whose
// output streams as events, memory writes, an env episode, a toolkit
// configured with a password — and each secret planted in a tool's
// arguments, a file, working memory, a process's output and a request id.
// It returns the secrets planted, the transport id among them.
func (r *rig) script(t testing.TB, c *client.Client, pipe *server.LinePipe) []string {
	t.Helper()
	ctx := aeptest.Context(t)
	secrets := []string{hostToken, tenantSecret, otherSecret, password, c.SessionID()}
	dir := filepath.Join(r.dataDir, "sessions", aeptest.Handle(t, c))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := c.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: msg.ToolkitConfigureReqConfig{
		"driver": "sqlite", "database": "app.db", "mode": "read_write", "password": password}}); err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure %+v %v", res, err)
	}
	mem, err := c.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range secrets {
		if res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "write_file",
			Arguments: map[string]any{"path": fmt.Sprintf("note%d.txt", i), "content": "the key is " + s}}); err != nil || !res.Success {
			t.Fatalf("write_file %+v %v", res, err)
		}
		if res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "read_file",
			Arguments: map[string]any{"path": fmt.Sprintf("note%d.txt", i)}}); err != nil || !res.Success {
			t.Fatalf("read_file %+v %v", res, err)
		}
		raw, _ := json.Marshal("remember " + s)
		if _, err := c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: mem.MemoryID,
			Entries: []msg.MemoryEntry{{Key: "k-" + s, Tier: "working", Content: raw}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: mem.MemoryID, Keys: []string{"k-" + s}}); err != nil {
			t.Fatal(err)
		}
		// An id of the agent's choosing.
		line := fmt.Sprintf(`{"type":"tool/list/req","id":"id-%s","proto":"1.0","ts":1}`, s)
		if err := pipe.WriteLine(ctx, []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	// A command whose output, holding every secret, streams as events.
	sp, err := c.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"sh", "-c", "cat note0.txt note1.txt; echo; echo " + password + "; echo " + c.SessionID()}})
	if err != nil {
		t.Fatal(err)
	}
	streamed := 0
	ectx := client.WithEvents(ctx, func(e client.Event) { streamed++ })
	if _, err := c.ProcRead(ectx, &msg.ProcReadReq{ProcID: sp.Process.ProcID, Follow: true, FollowTimeout: aeptest.Ptr(10.0)}); err != nil {
		t.Fatal(err)
	}
	if streamed == 0 {
		t.Fatal("the command streamed no events")
	}
	// A request the agent cancels: the host answers it cancelled.
	sleeper, err := c.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := c.ProcWait(cctx, &msg.ProcWaitReq{ProcID: sleeper.Process.ProcID}); err == nil {
		t.Fatal("the wait was not cancelled")
	}
	cancel()
	if _, err := c.ProcKill(ctx, &msg.ProcKillReq{ProcID: sleeper.Process.ProcID}); err != nil {
		t.Fatal(err)
	}
	// An env episode.
	reset, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(7)})
	if err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 3; g++ {
		if _, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: reset.EpisodeID, Action: json.RawMessage(fmt.Sprint(g * 10))}); err != nil {
			t.Fatal(err)
		}
	}
	// A failing call: an error code on the page.
	if _, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": "../../etc/" + hostToken}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Request(ctx, &msg.Ping{}); err != nil {
		t.Fatal(err)
	}
	return secrets
}

// get fetches path from the operator listener with the operator token.
func (r *rig) get(t testing.TB, ctx context.Context, path string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", r.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// event is one server-sent event.
type event struct {
	name string
	data string
}

// readEvents reads body's events into out until it ends or stop says so.
func readEvents(body io.Reader, stop func(event) bool) []event {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []event
	var cur event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[len("data: "):]
		case line == "" && cur.name != "":
			out = append(out, cur)
			if stop(cur) {
				return out
			}
			cur = event{}
		}
	}
	return out
}
