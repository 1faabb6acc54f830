package server_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// TestDrainSeals: a drain that snapshots seals its host first, so that
// nothing is answered as done that the snapshots do not hold: a request
// still running at the drain's deadline is answered cancelled, a request
// sent after the seal is answered shutting_down (its client knows it never
// ran), and a drain without snapshots seals nothing.
func TestDrainSeals(t *testing.T) {
	for _, snapshot := range []bool{true, false} {
		t.Run(map[bool]string{true: "snapshot", false: "no snapshot"}[snapshot], func(t *testing.T) {
			ctx := aeptest.Context(t)
			plug := &echoplug.Plugin{Started: make(chan string, 8)}
			h := storedEchoHost(t, plug)
			_, ec := connect(t, h)
			gate := "g"
			waited := make(chan error, 1)
			go func() {
				_, err := ec.EchoWait(ctx, &testproto.EchoWaitReq{Gate: &gate})
				waited <- err
			}()
			if err := waitFor(ctx, plug.Started, gate); err != nil {
				t.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			res, err := h.Drain(dctx, snapshot)
			cancel()
			if err != nil || res.Unfinished != 1 {
				t.Fatalf("drain: %+v %v", res, err)
			}
			_, err = ec.EchoSay(ctx, &testproto.EchoSayReq{Text: "after"})
			if !snapshot {
				plug.Release(gate)
				if err != nil {
					t.Fatalf("a drain without snapshots refused a request: %v", err)
				}
				if err := <-waited; err != nil {
					t.Fatalf("the request in flight: %v", err)
				}
				return
			}
			aeptest.WantReason(t, err, wire.CodeRuntimeError, "shutting_down")
			aeptest.WantError(t, <-waited, wire.CodeCancelled, "")
			if len(res.Snapshots) != 1 {
				t.Fatalf("snapshots %v", res.Snapshots)
			}
			plug.Release(gate)
		})
	}
}

// TestDrainSealsRequestsBeingAdmitted: a request that passed its checks
// just before the seal and is admitted after the drain found nothing in
// flight (and snapshotted) is refused shutting_down like any request after
// the seal; admitted, it would run and be answered past the snapshot's
// point, lost to the session's next host.
func TestDrainSealsRequestsBeingAdmitted(t *testing.T) {
	ctx := aeptest.Context(t)
	h := storedEchoHost(t, &echoplug.Plugin{})
	_, ec := connect(t, h)
	paused, resume := make(chan struct{}), make(chan struct{})
	reset := server.SetBeforeAdmit(func() {
		close(paused)
		<-resume
	})
	defer reset()
	said := make(chan error, 1)
	go func() {
		_, err := ec.EchoSay(ctx, &testproto.EchoSayReq{Text: "raced"})
		said <- err
	}()
	<-paused
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	res, err := h.Drain(dctx, true)
	cancel()
	if err != nil || res.Unfinished != 0 || len(res.Snapshots) != 1 {
		t.Fatalf("drain: %+v %v", res, err)
	}
	close(resume)
	aeptest.WantReason(t, <-said, wire.CodeRuntimeError, "shutting_down")
}

// sqliteStore is a SQLite store in a temporary data directory, closed
// when the test ends, and that directory.
func sqliteStore(t *testing.T) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(aeptest.Context(t), "sqlite://"+filepath.Join(dir, "aep.db"), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dir
}

// storedEchoHost is a host with a SQLite store, so its drains snapshot,
// and plug as its echo plugin.
func storedEchoHost(t *testing.T, plug *echoplug.Plugin) *server.Host {
	t.Helper()
	ctx := aeptest.Context(t)
	st, dir := sqliteStore(t)
	h, err := server.New(ctx, server.Config{Server: server.ServerConfig{AuthToken: "secret"}},
		server.WithRegistry(testRegistry()), server.WithDataDir(dir), server.WithStore(st),
		server.WithPlugin(echoSpec("e", 0, false, plug)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}
