package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// defaultCap is tools' max_output_bytes by default (docs/DECISIONS.md,
// Tools and toolkits): the bound of a whole tool/call/resp line.
const defaultCap = 1 << 20

// TestOutputCapBoundsWholeReply runs run_command with 20 MB and 100 MB of
// output, one log event a line, on hosts with the default configuration:
// the reply, its events included, and every streamed event are at most the
// output cap, and the host's peak memory does not grow with the output
// (docs/SECURITY.md, The edge: bounded replies).
func TestOutputCapBoundsWholeReply(t *testing.T) {
	t.Parallel()
	growth := map[int]int64{}
	for _, size := range []int{20_000_000, 100_000_000} {
		h := startHost(t, "")
		c := newClient()
		sid, st := h.agent(t, c)
		base := h.settle(t)

		id := fmt.Sprint("run-", size)
		h.send(t, c, sid, toolCall(id, false, "run_command", outputCommand(size)))
		m, n := st.message(t, id, 3*time.Minute)
		res, _ := m["result"].(map[string]any)
		if res == nil || res["success"] != true || res["truncated"] != true {
			t.Fatalf("%d bytes of output: reply %.300v", size, m)
		}
		if n > defaultCap {
			t.Fatalf("%d bytes of output: a reply of %d bytes, over the cap of %d", size, n, defaultCap)
		}
		if evs, _ := res["events"].([]any); len(evs) == 0 {
			t.Fatalf("%d bytes of output: no events kept at all", size)
		}
		growth[size] = h.peak(t) - base
		t.Logf("%d bytes of output: reply %d bytes, host peak RSS +%.1f MiB", size, n, float64(growth[size])/mib)

		if size == 20_000_000 {
			// Streamed, every event is within the cap too, and all of
			// them together within max_stream_bytes (16 MiB by default)
			// and one event: the last says the stream was truncated.
			id := "stream-run"
			h.send(t, c, sid, toolCall(id, true, "run_command", outputCommand(size)))
			events, streamed := 0, 0
			var last []byte
			for {
				f := st.next(t, 3*time.Minute)
				if f.data == nil {
					continue
				}
				if len(f.data) > defaultCap {
					t.Fatalf("a streamed line of %d bytes, over the cap", len(f.data))
				}
				if contains(f.data, `"type":"tool/event"`) {
					events++
					streamed += len(f.data)
					last = f.data
				}
				if contains(f.data, `"req_id":"`+id+`"`) && contains(f.data, `"type":"tool/call/resp"`) {
					break
				}
			}
			if events == 0 {
				t.Fatal("no tool/event streamed")
			}
			const maxStream = 16 << 20
			if streamed > maxStream+defaultCap {
				t.Fatalf("%d bytes of events streamed, over max_stream_bytes %d and one event", streamed, maxStream)
			}
			if !contains(last, `"kind":"status"`) || !contains(last, `"truncated":true`) || !contains(last, "stream truncated") {
				t.Fatalf("the last streamed event does not say the stream was truncated: %.300s", last)
			}
			t.Logf("streamed %d events, %d bytes; last %.200s", events, streamed, last)
		}
	}
	// Five times the output may not cost five times the memory: what the
	// extra 80 MB add is well under their size.
	if extra := growth[100_000_000] - growth[20_000_000]; extra > 40*mib {
		t.Fatalf("peak RSS grows with the output: +%.1f MiB for 20 MB, +%.1f MiB for 100 MB",
			float64(growth[20_000_000])/mib, float64(growth[100_000_000])/mib)
	}
	if growth[20_000_000] > 64*mib {
		t.Fatalf("peak RSS +%.1f MiB for a reply capped at 1 MiB", float64(growth[20_000_000])/mib)
	}
}

func contains(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }
