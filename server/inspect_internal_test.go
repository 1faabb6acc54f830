package server

import (
	"context"
	"testing"

	"github.com/aephost/aep/server/inspect"
)

// TestInspectHooksRemoved: once the last tap and the watch stop, the
// hooks a message passes are nil again, so a host with no page open pays
// one atomic load per hook and nothing else.
func TestInspectHooksRemoved(t *testing.T) {
	cfg := Defaults()
	cfg.Server.AuthToken = "inspect-test-token"
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	p, err := h.ConnectLines(16)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := p.Session()
	var taps []inspect.Tapped
	for range inspect.MaxTaps {
		tp, err := h.Operator().Inspect().Tap(s.handle, func(inspect.Message) {})
		if err != nil {
			t.Fatal(err)
		}
		taps = append(taps, tp)
	}
	if _, err := h.Operator().Inspect().Tap(s.handle, func(inspect.Message) {}); err != inspect.ErrTooManyTaps {
		t.Fatalf("tap beyond the bound: %v", err)
	}
	stop := h.Operator().Inspect().Watch(func(inspect.Event) {})
	if s.tap.Load() == nil || h.watch.Load() == nil {
		t.Fatal("hooks not installed")
	}
	for _, tp := range taps {
		tp.Stop()
	}
	stop()
	if s.tap.Load() != nil || h.watch.Load() != nil {
		t.Fatal("hooks left installed after the last page left")
	}
}
