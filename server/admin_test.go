package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/operator"
	"github.com/aephost/aep/wire"
)

// The kernel's admin entry points (server/admin.go), in process; the API
// over HTTP is server/httpapi's test and the real binary internal/aepbin's.

// records keeps the audit records a host writes.
type records struct {
	mu   sync.Mutex
	list []server.AuditRecord
}

func (r *records) Record(x server.AuditRecord) {
	r.mu.Lock()
	r.list = append(r.list, x)
	r.mu.Unlock()
}

func (r *records) all() []server.AuditRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

func adminHost(t *testing.T, plug *echoplug.Plugin, rec *records) *server.Host {
	t.Helper()
	ctx := aeptest.Context(t)
	st, dir := sqliteStore(t)
	sum := sha256.Sum256([]byte("team-b-secret-123"))
	cfg := server.Config{Server: server.ServerConfig{AuthToken: "secret", Tenants: []server.TenantConfig{
		{Name: "team-b", SecretSHA256: []string{hex.EncodeToString(sum[:])}, Capabilities: []string{"echo"}}}}}
	h, err := server.New(ctx, cfg, server.WithRegistry(testRegistry()), server.WithDataDir(dir), server.WithStore(st),
		server.WithAuditor(rec), server.WithPlugin(echoSpec("e", 0, false, plug)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// attach connects an in-process client to a host-made session by its id.
func attach(t *testing.T, h *server.Host, id string) *client.Client {
	t.Helper()
	p, err := h.ConnectLinesTo(id, 64)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Lines(checkedConn{t: t, LinePipe: p}, h.Registry()))
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOperatorOpenedSession: a session the operator opens for a tenant is
// handshaken with the token issued for it alone — not the tenant's
// secret, not the host's — gets its tenant's capabilities narrowed by the
// open, is marked in session/info, and its requests are audited with the
// operator as actor. An unknown tenant is refused.
func TestOperatorOpenedSession(t *testing.T) {
	ctx := aeptest.Context(t)
	rec := &records{}
	h := adminHost(t, &echoplug.Plugin{}, rec)
	if _, err := h.Operator().Open("nobody", nil); !errors.Is(err, operator.ErrNoSuchTenant) {
		t.Fatalf("unknown tenant: %v", err)
	}
	o, err := h.Operator().Open("team-b", []string{"echo"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Tenant != "team-b" || o.Token == "" || o.ID == "" || o.Handle == "" || time.Until(o.Expires) <= 0 {
		t.Fatalf("opened: %+v", o)
	}
	// Neither the tenant's secret nor the host's opens it.
	c := attach(t, h, o.ID)
	for _, tok := range []string{"team-b-secret-123", "secret"} {
		hs, err := c.Handshake(ctx, "op", tok, "echo")
		if err == nil || hs.Ok {
			t.Fatalf("handshake with %q: %+v %v", tok, hs, err)
		}
	}
	hs, err := c.Handshake(ctx, "inspector", o.Token, "echo", "memory", "session")
	if err != nil || !hs.Ok {
		t.Fatalf("handshake with the issued token: %+v %v", hs, err)
	}
	on := map[string]bool{}
	for _, e := range hs.AcceptedCaps {
		on[e.Name] = e.Enabled
	}
	if !on["echo"] || on["memory"] || !on["session"] {
		t.Fatalf("accepted caps: %+v", hs.AcceptedCaps)
	}
	info, err := c.SessionInfo(ctx, &msg.SessionInfoReq{})
	if err != nil || info.OperatorOpened == nil || !*info.OperatorOpened || info.Handle != o.Handle {
		t.Fatalf("session/info: %+v %v", info, err)
	}
	if _, err := (testproto.Client{Requester: c}).EchoSay(ctx, &testproto.EchoSayReq{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	// The audit line is written after the reply is sent: wait for it.
	var say *server.AuditRecord
	for say == nil && ctx.Err() == nil {
		for _, r := range rec.all() {
			if r.Type == "echo/say/req" && r.SessionID == o.Handle {
				say = &r
			}
		}
		if say == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if say == nil || say.Actor != operator.Actor || say.Tenant != "team-b" {
		t.Fatalf("audit of the operator's session's request: %+v", say)
	}
	// An agent's own session says nothing of the operator.
	a, _ := connect(t, h, "echo", "session")
	ai, err := a.SessionInfo(ctx, &msg.SessionInfoReq{})
	if err != nil || ai.OperatorOpened != nil {
		t.Fatalf("an agent's session/info: %+v %v", ai, err)
	}
	rep, err := h.Operator().Session(o.Handle)
	if err != nil || !rep.OperatorOpened || rep.Tenant != "team-b" || rep.AgentID != "inspector" || rep.State != "live" || rep.Budgets == nil {
		t.Fatalf("report: %+v %v", rep, err)
	}
}

// TestTerminateSession: a request in flight is answered runtime_error
// reason terminated (not retryable), the next request finds the session
// gone, the plugin's state of the session is dropped, and the handle is
// unknown to the admin entry points from then on.
func TestTerminateSession(t *testing.T) {
	ctx := aeptest.Context(t)
	plug := &echoplug.Plugin{Started: make(chan string, 8)}
	h := adminHost(t, plug, &records{})
	c, ec := connect(t, h)
	handle := aeptest.Handle(t, c)
	gate := "g"
	waited := make(chan error, 1)
	go func() {
		_, err := ec.EchoWait(ctx, &testproto.EchoWaitReq{Gate: &gate})
		waited <- err
	}()
	if err := waitFor(ctx, plug.Started, gate); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Operator().Terminate("h-nobody"); !errors.Is(err, operator.ErrNoSuchSession) {
		t.Fatalf("unknown handle: %v", err)
	}
	r, err := h.Operator().Terminate(handle)
	if err != nil || r.Handle != handle || r.Tenant != "default" {
		t.Fatalf("terminate: %+v %v", r, err)
	}
	we := aeptest.WantReason(t, <-waited, wire.CodeRuntimeError, "terminated")
	if we.Retryable() {
		t.Fatal("terminated is retryable")
	}
	plug.Release(gate)
	if _, err := h.Operator().Session(handle); !errors.Is(err, operator.ErrNoSuchSession) {
		t.Fatalf("inspect after terminate: %v", err)
	}
	if _, err := h.Operator().Terminate(handle); !errors.Is(err, operator.ErrNoSuchSession) {
		t.Fatalf("terminate twice: %v", err)
	}
	if _, err := h.Operator().Snapshot(ctx, handle, ""); !errors.Is(err, operator.ErrNoSuchSession) {
		t.Fatalf("snapshot after terminate: %v", err)
	}
}

// TestAdminSnapshotRestores: the operator's snapshot (sql by default on a
// host with a store) is one another session restores, and it is the
// session's newest in the list and in its stored snapshots.
func TestAdminSnapshotRestores(t *testing.T) {
	ctx := aeptest.Context(t)
	h := adminHost(t, &echoplug.Plugin{}, &records{})
	c, _ := connect(t, h, "echo", "session")
	handle := aeptest.Handle(t, c)
	snap, err := h.Operator().Snapshot(ctx, handle, "")
	if err != nil || snap.Target != "sql" || snap.ID == "" {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	list, total, _ := h.Operator().Sessions(0)
	if total != 1 || list[0].Newest == nil || list[0].Newest.ID != snap.ID {
		t.Fatalf("list: %+v", list)
	}
	stored, err := h.Operator().Snapshots(ctx, handle, 10)
	if err != nil || len(stored) != 1 || stored[0].ID != snap.ID {
		t.Fatalf("stored: %+v %v", stored, err)
	}
	other, _ := connect(t, h, "echo", "session")
	res, err := other.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &snap.ID})
	if err != nil || res.SnapshotID != snap.ID {
		t.Fatalf("restore of the operator's snapshot: %+v %v", res, err)
	}
	if _, err := h.Operator().Snapshot(ctx, handle, "tape"); err == nil {
		t.Fatal("an unknown target was taken")
	}
}

// TestAdminListAndUndrain: anonymous pending sessions are counted, not
// listed; host-made ones waiting for their agent are listed; a drain that
// snapshots, its saved sessions ended, and an undrain leave the host
// ready, taking new sessions and admitting requests in what is left.
func TestAdminListAndUndrain(t *testing.T) {
	ctx := aeptest.Context(t)
	h := adminHost(t, &echoplug.Plugin{}, &records{})
	if _, err := h.ConnectLines(8); err != nil { // an agent's, not handshaken
		t.Fatal(err)
	}
	o, err := h.Operator().Open("default", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, ec := connect(t, h)
	list, total, pending := h.Operator().Sessions(0)
	if total != 2 || pending != 1 || len(list) != 2 || list[0].Handle != o.Handle || list[0].State != "pending" || list[1].Transport != "inprocess" {
		t.Fatalf("list: total %d pending %d %+v", total, pending, list)
	}
	if l, _, _ := h.Operator().Sessions(1); len(l) != 1 {
		t.Fatalf("limit 1: %d listed", len(l))
	}
	res, err := h.Drain(ctx, true)
	if err != nil || len(res.Snapshots) != 1 {
		t.Fatalf("drain: %+v %v", res, err)
	}
	if err := h.Ready(ctx); !errors.Is(err, server.ErrDraining) {
		t.Fatalf("ready while draining: %v", err)
	}
	if _, err := h.Operator().Open("default", nil); !errors.Is(err, server.ErrDraining) {
		t.Fatalf("open while draining: %v", err)
	}
	handles := make([]string, 0, 1)
	for hd := range res.Snapshots {
		handles = append(handles, hd)
	}
	if n := h.Operator().EndSessions(handles); n != 1 {
		t.Fatalf("ended %d", n)
	}
	if _, err := ec.EchoSay(ctx, &testproto.EchoSayReq{Text: "x"}); err == nil {
		t.Fatal("a saved session still answers after the drain ended it")
	}
	if !h.Operator().Undrain() || h.Draining() {
		t.Fatal("undrain")
	}
	if err := h.Ready(ctx); err != nil {
		t.Fatalf("ready after undrain: %v", err)
	}
	_, ec2 := connect(t, h)
	if _, err := ec2.EchoSay(ctx, &testproto.EchoSayReq{Text: "y"}); err != nil {
		t.Fatalf("a new session after undrain: %v", err)
	}
	if h.Operator().Undrain() {
		t.Fatal("undrain of a host not draining said it was")
	}
}

// TestAuditAdmin: an admin action's audit line names the operator as
// actor and admin/<action> as type.
func TestAuditAdmin(t *testing.T) {
	rec := &records{}
	h := adminHost(t, &echoplug.Plugin{}, rec)
	t0 := time.Now()
	h.Operator().Audit(operator.Action{Action: "session.terminate", Session: "h-x", Tenant: "team-b", Started: t0, Duration: time.Millisecond})
	h.Operator().Audit(operator.Action{Action: "drain", Code: "conflict", Started: t0})
	got := rec.all()
	if len(got) != 2 || got[0].Type != "admin/session.terminate" || got[0].Actor != "operator" || !got[0].Success || got[0].SessionID != "h-x" ||
		got[1].Success || got[1].ErrorCode != "conflict" {
		t.Fatalf("records: %+v", got)
	}
}
