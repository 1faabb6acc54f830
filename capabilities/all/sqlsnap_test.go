package all_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
)

func sqlRun(t *testing.T, ctx context.Context, c *client.Client, q string, params ...any) *msg.ToolResult {
	t.Helper()
	args := map[string]any{"sql": q}
	if len(params) > 0 {
		args["params"] = params
	}
	res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "sql_query", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// rowsOf is the rows of a sql_query result.
func rowsOf(t *testing.T, res *msg.ToolResult) [][]any {
	t.Helper()
	if !res.Success {
		t.Fatalf("query failed: %v", *res.Error)
	}
	b, _ := json.Marshal(res.Data)
	var out struct {
		Rows [][]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.Rows
}

// checkDatabase configures c's sql toolkit on live.db and checks that it is
// whole; it returns its row count.
func checkDatabase(t *testing.T, ctx context.Context, c *client.Client, what string) int {
	t.Helper()
	r, err := c.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql",
		Config: msg.ToolkitConfigureReqConfig{"driver": "sqlite", "database": "live.db", "mode": "read_write"}})
	if err != nil || r.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("%s: configure: %+v %v", what, r, err)
	}
	if got := fmt.Sprint(rowsOf(t, sqlRun(t, ctx, c, "PRAGMA integrity_check"))); got != "[[ok]]" {
		t.Fatalf("%s: integrity_check %s", what, got)
	}
	n := rowsOf(t, sqlRun(t, ctx, c, "SELECT count(*) FROM t"))
	return int(n[0][0].(float64))
}

// TestSQLiteCopiesWhileWriting: a database written continuously (in WAL
// mode, three files) is carried whole by each of 20 sql snapshots and by a
// fork taken meanwhile: every copy passes PRAGMA integrity_check, and
// later snapshots hold at least as many rows as earlier ones. The kernel
// holds the toolkit's worker (checkpointed) while it copies the files
// (server/persist/dirs.go, FileHolder).
func TestSQLiteCopiesWhileWriting(t *testing.T) {
	// Forty copies of a growing database under -race on a loaded runner
	// take longer than aeptest.Context's 30 s; this is a liveness bound
	// only, the test judges what the copies hold.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newForkRig(t, nil)
	a := aeptest.Connect(t, r.h, forkCaps...)
	cfg := msg.ToolkitConfigureReqConfig{"driver": "sqlite", "database": "live.db", "mode": "read_write"}
	if res, err := a.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: cfg}); err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure: %+v %v", res, err)
	}
	if got := fmt.Sprint(rowsOf(t, sqlRun(t, ctx, a, "PRAGMA journal_mode=WAL"))); got != "[[wal]]" {
		t.Fatalf("journal_mode %s", got)
	}
	// A checkpoint after every commit rewrites the main file all the time,
	// so a copy of the files taken while it happens would be torn.
	sqlRun(t, ctx, a, "PRAGMA wal_autocheckpoint=1")
	if res := sqlRun(t, ctx, a, "CREATE TABLE t (i INTEGER PRIMARY KEY, pad TEXT)"); !res.Success {
		t.Fatal(*res.Error)
	}
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		written  atomic.Int64
		progress = make(chan struct{}, 1) // a write was acknowledged
	)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := a.CallTool(ctx, &msg.ToolCallReq{ToolName: "sql_query", Arguments: map[string]any{
					"sql": "INSERT INTO t (pad) SELECT hex(randomblob(3000)) FROM (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3)"}})
				if err != nil || !res.Success {
					t.Errorf("insert: %+v %v", res, err)
					return
				}
				written.Add(3)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}
	var snaps []string
	var forkID string
	for i := 0; i < 20; i++ {
		// Each snapshot is taken after at least one more write, while
		// writes go on.
		<-progress
		s, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "sql"})
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		if s.Files == nil || s.Files.State != msg.SnapshotFilesStateStored {
			close(stop)
			t.Fatalf("snapshot %d without its files: %+v", i, s.Files)
		}
		snaps = append(snaps, s.SnapshotID)
		if i == 10 {
			f, err := a.SessionFork(ctx, &msg.SessionForkReq{Count: 1})
			if err != nil {
				close(stop)
				t.Fatal(err)
			}
			forkID = f.Forks[0].SessionID
		}
	}
	close(stop)
	wg.Wait()
	if written.Load() < 20*3 {
		t.Fatalf("only %d rows written during the snapshots: the test proves nothing", written.Load())
	}
	last := 0
	for i, id := range snaps {
		b := aeptest.Connect(t, r.h, forkCaps...)
		if _, err := b.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &id}); err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		n := checkDatabase(t, ctx, b, fmt.Sprintf("snapshot %d", i))
		if n < last {
			t.Fatalf("snapshot %d holds %d rows, the one before %d", i, n, last)
		}
		last = n
		b.Close()
	}
	if n := checkDatabase(t, ctx, r.attach(t, ctx, forkID), "fork"); n == 0 {
		t.Fatal("the fork's copy is empty")
	}
	t.Logf("%d rows written; the last snapshot holds %d", written.Load(), last)
}
