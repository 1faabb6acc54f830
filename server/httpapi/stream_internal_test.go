package httpapi

import (
	"strings"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// held is the memory st's ring holds: its frames' and the evicted frames'
// kept for reuse.
func (st *stream) held() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	total := 0
	for _, f := range st.ring {
		total += cap(f.data)
	}
	return total
}

// TestStreamRingHoldsItsBound sends a session's stream, which nobody
// reads, messages of several sizes in turn: whatever came before, the
// ring holds at most its byte bound of frames plus as much again kept for
// reuse, and the newest message, however large. A slot that once held a
// large frame used to keep its memory for good, so a long session grew
// its host by the largest message times the ring's slots.
func TestStreamRingHoldsItsBound(t *testing.T) {
	const limit, slots = 64 << 10, 64
	for _, c := range []struct {
		name  string
		sizes []int // message payload sizes, sent in turn
	}{
		{"large ones", []int{16 << 10}},
		{"one larger than the bound", []int{100 << 10}},
		{"large then small", []int{16 << 10, 16 << 10, 100, 100, 100, 100}},
		{"small then large", []int{100, 100, 100, 20 << 10}},
		{"just over a slot's share", []int{limit/slots + 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newStream(&api{opts: Options{BufferMessages: slots, BufferBytes: limit, PendingBufferBytes: limit}})
			largest := 0
			for i := range 10 * slots {
				size := c.sizes[i%len(c.sizes)]
				p := &wire.Packet{
					Envelope: wire.Envelope{Type: "tool/event", ID: wire.NewID(), ReqID: "r1", TS: 1},
					Msg:      &msg.Event{Kind: msg.EventKind("log"), Data: msg.EventData{"line": strings.Repeat("a", size)}, Seq: i},
				}
				n, err := st.Send(p)
				if err != nil {
					t.Fatal(err)
				}
				largest = max(largest, n+64)
				if got, most := st.held(), 2*limit+largest; got > most {
					t.Fatalf("after %d messages the ring holds %d bytes, over %d (twice its bound and the largest frame)", i+1, got, most)
				}
			}
			if st.n == 0 {
				t.Fatal("the ring holds no frame")
			}
		})
	}
}
