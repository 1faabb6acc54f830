package proc_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/proc"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/wire"
)

func TestCatRoundTrip(t *testing.T) {
	c := aeptest.Connect(t, newHost(t, &proc.Plugin{}), "proc")
	ctx := aeptest.Context(t)
	rec := spawn(t, c, "cat")
	if rec.State != msg.ProcRecordStateRunning || rec.Pid <= 0 {
		t.Fatalf("record %+v", rec)
	}
	for _, part := range []string{"hello ", "world\n"} {
		w, err := c.ProcWrite(ctx, &msg.ProcWriteReq{ProcID: rec.ProcID, Data: &part})
		if err != nil || w.Written != len(part) {
			t.Fatalf("write: %+v %v", w, err)
		}
	}
	if _, err := c.ProcWrite(ctx, &msg.ProcWriteReq{ProcID: rec.ProcID, Eof: true}); err != nil {
		t.Fatal(err)
	}
	wr, err := wait(t, c, rec.ProcID)
	if err != nil {
		t.Fatal(err)
	}
	p := wr.Process
	if p.State != msg.ProcRecordStateExited || p.ExitCode == nil || *p.ExitCode != 0 || p.EndedAt == nil || *p.EndedAt < p.StartedAt {
		t.Fatalf("record after eof: %+v", p)
	}
	r, err := c.ProcRead(ctx, &msg.ProcReadReq{ProcID: rec.ProcID})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout.Data != "hello world\n" || r.Stdout.NextCursor != 12 || !r.Stdout.Eof || r.Stdout.Dropped != 0 {
		t.Fatalf("stdout %+v", r.Stdout)
	}
	// Reading on from the cursor gives nothing more.
	r, _ = c.ProcRead(ctx, &msg.ProcReadReq{ProcID: rec.ProcID, StdoutCursor: 6, MaxBytes: aeptest.Ptr(3)})
	if r.Stdout.Data != "wor" || r.Stdout.NextCursor != 9 {
		t.Fatalf("cursor read %+v", r.Stdout)
	}
	if _, err := c.ProcWrite(ctx, &msg.ProcWriteReq{ProcID: rec.ProcID, Data: aeptest.Ptr("late")}); err == nil {
		t.Fatal("write after eof succeeded")
	}
}

func TestOutputPastCapTruncated(t *testing.T) {
	const buf = 4096
	c := aeptest.Connect(t, newHost(t, &proc.Plugin{Settings: proc.Settings{BufferBytes: buf}}), "proc")
	rec := spawn(t, c, "sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2")
	if _, err := wait(t, c, rec.ProcID); err != nil {
		t.Fatal(err)
	}
	r, err := c.ProcRead(aeptest.Context(t), &msg.ProcReadReq{ProcID: rec.ProcID})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout.Data) != buf || r.Stdout.Dropped != 100000-buf || r.Stdout.Cursor != 100000-buf || r.Stdout.NextCursor != 100000 || !r.Stdout.Eof {
		t.Fatalf("stdout: len %d cursor %d next %d dropped %d eof %v", len(r.Stdout.Data), r.Stdout.Cursor, r.Stdout.NextCursor, r.Stdout.Dropped, r.Stdout.Eof)
	}
	if r.Stderr.Data != "done\n" {
		t.Fatalf("stderr %q", r.Stderr.Data)
	}
}

// TestSlowReaderStallsNoOne: a process whose output nobody reads keeps
// running (its pipe is drained into the ring), and another session's
// processes and requests go on meanwhile.
func TestSlowReaderStallsNoOne(t *testing.T) {
	h := newHost(t, &proc.Plugin{Settings: proc.Settings{BufferBytes: 64 << 10}})
	a, b := aeptest.Connect(t, h, "proc"), aeptest.Connect(t, h, "proc")
	flood := spawn(t, a, "yes", "flood")
	progress := func() int {
		r, err := a.ProcRead(aeptest.Context(t), &msg.ProcReadReq{ProcID: flood.ProcID, MaxBytes: aeptest.Ptr(1)})
		if err != nil {
			t.Fatal(err)
		}
		return r.Stdout.Dropped
	}
	before := progress()
	for i := 0; i < 5; i++ {
		rec := spawn(t, b, "cat")
		if _, err := b.ProcWrite(aeptest.Context(t), &msg.ProcWriteReq{ProcID: rec.ProcID, Data: aeptest.Ptr("x" + strconv.Itoa(i)), Eof: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := wait(t, b, rec.ProcID); err != nil {
			t.Fatal(err)
		}
		if out, _ := readAll(t, b, rec.ProcID); out != "x"+strconv.Itoa(i) {
			t.Fatalf("session b got %q", out)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for progress() <= before+(1<<20) {
		if time.Now().After(deadline) {
			t.Fatal("the unread process stopped producing output: its pipe is not drained")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A follow read that hits its byte cap returns; nothing follows its reply.
	var mu sync.Mutex
	events, replied := 0, false
	ctx := client.WithEvents(aeptest.Context(t), func(e client.Event) {
		mu.Lock()
		defer mu.Unlock()
		if replied {
			t.Error("event after the reply")
		}
		events++
	})
	r, err := a.ProcRead(ctx, &msg.ProcReadReq{ProcID: flood.ProcID, Follow: true, MaxBytes: aeptest.Ptr(50000), StdoutCursor: 1 << 40})
	mu.Lock()
	replied = true
	mu.Unlock()
	if err != nil || r.Streamed == nil || *r.Streamed != 50000 || events == 0 {
		t.Fatalf("follow: %+v %v events %d", r, err, events)
	}
}

func TestFollowEventsBeforeReply(t *testing.T) {
	c := aeptest.Connect(t, newHost(t, &proc.Plugin{}), "proc")
	rec := spawn(t, c, "sh", "-c", "echo one; sleep 0.1; echo two >&2; sleep 0.1; echo three")
	var got []string
	var seqs []int
	ctx := client.WithEvents(aeptest.Context(t), func(e client.Event) {
		if e.Type != "proc/event" || e.Kind != wire.EventArtifact {
			t.Errorf("event %+v", e)
		}
		got = append(got, e.Data["name"].(string)+":"+e.Data["chunk"].(string))
		seqs = append(seqs, e.Seq)
	})
	r, err := c.ProcRead(ctx, &msg.ProcReadReq{ProcID: rec.ProcID, Follow: true, FollowTimeout: aeptest.Ptr(10.0)})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, "|")
	if !strings.Contains(joined, "stdout:one\n") || !strings.Contains(joined, "stderr:two\n") || !strings.Contains(joined, "stdout:three\n") ||
		strings.Index(joined, "one") > strings.Index(joined, "two") || strings.Index(joined, "two") > strings.Index(joined, "three") {
		t.Fatalf("events %q", got)
	}
	for i, s := range seqs {
		if s != i {
			t.Fatalf("seq %v", seqs)
		}
	}
	if !r.Stdout.Eof || !r.Stderr.Eof || r.Stdout.NextCursor != 10 || r.Stdout.Data != "" || *r.Streamed != 14 {
		t.Fatalf("reply %+v", r)
	}
}

// TestFollowEndsAtItsTimeout: a follow read of a process that keeps running
// streams what there is and replies when follow_timeout passes, with the
// process still running and the streams open; no event follows the reply.
func TestFollowEndsAtItsTimeout(t *testing.T) {
	c := aeptest.Connect(t, newHost(t, &proc.Plugin{}), "proc")
	rec := spawn(t, c, "sh", "-c", "echo first; exec sleep 1000")
	var mu sync.Mutex
	var chunks []string
	replied := false
	ctx := client.WithEvents(aeptest.Context(t), func(e client.Event) {
		mu.Lock()
		defer mu.Unlock()
		if replied {
			t.Error("event after the reply")
		}
		if e.Type == "proc/event" && e.Kind == wire.EventArtifact {
			chunks = append(chunks, e.Data["name"].(string)+":"+e.Data["chunk"].(string))
		}
	})
	r, err := c.ProcRead(ctx, &msg.ProcReadReq{ProcID: rec.ProcID, Follow: true, FollowTimeout: aeptest.Ptr(0.3)})
	mu.Lock()
	replied = true
	got := strings.Join(chunks, "|")
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got != "stdout:first\n" || r.State != string(msg.ProcRecordStateRunning) || r.Stdout.Eof || r.Stderr.Eof ||
		r.Streamed == nil || *r.Streamed != 6 || r.Stdout.NextCursor != 6 {
		t.Fatalf("follow of a running process: events %q, reply %+v", got, r)
	}
	// Reading on from the reply's cursor picks up where the follow stopped.
	r2, err := c.ProcRead(aeptest.Context(t), &msg.ProcReadReq{ProcID: rec.ProcID, StdoutCursor: r.Stdout.NextCursor})
	if err != nil || r2.Stdout.Data != "" || r2.Stdout.Cursor != 6 {
		t.Fatalf("read after follow: %+v %v", r2, err)
	}
}
