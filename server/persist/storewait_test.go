package persist

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// storeCall waits for a store that fails its ping, bounded, and answers
// store_unavailable (retryable) at the end; an error of a store that
// answers is returned at once; wait 0 tries once.
func TestStoreCall(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := &Keeper{store: st, log: slog.New(slog.DiscardHandler)}
	boom := errors.New("constraint failed")

	tries := 0
	err = p.storeCall(ctx, "op", time.Second, func(context.Context) error { tries++; return boom })
	if !errors.Is(err, boom) || tries != 1 {
		t.Fatalf("a store that answers: %v after %d tries, want the op's own error after 1", err, tries)
	}
	tries = 0
	if err := p.storeCall(ctx, "op", time.Second, func(context.Context) error { tries++; return nil }); err != nil || tries != 1 {
		t.Fatalf("success: %v after %d tries", err, tries)
	}

	st.DB().Close() // from here on the store does not answer a ping
	for _, tc := range []struct {
		name      string
		wait      time.Duration
		wantTries func(int) bool
		wantErr   error
		minTook   time.Duration
	}{
		{"waits, then store_unavailable", 600 * time.Millisecond, func(n int) bool { return n >= 3 }, ErrStoreUnavailable, 600 * time.Millisecond},
		{"wait 0 tries once", 0, func(n int) bool { return n == 1 }, ErrStoreUnavailable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			t0 := time.Now()
			err := p.storeCall(ctx, "op", tc.wait, func(context.Context) error { tries++; return boom })
			took := time.Since(t0)
			if !errors.Is(err, tc.wantErr) || !tc.wantTries(tries) || took < tc.minTook {
				t.Fatalf("%v after %d tries in %v", err, tries, took)
			}
			we := wire.AsError(err)
			if we.Code != wire.CodeRuntimeError || wire.ReasonOf(we.Detail) != "store_unavailable" || !we.Retryable() {
				t.Fatalf("on the wire: %+v (retryable %v)", we, we.Retryable())
			}
		})
	}

	// A request that ends stops the wait with its own error.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if err := p.storeCall(cctx, "op", time.Minute, func(context.Context) error { return boom }); err == nil || time.Since(t0) > 5*time.Second {
		t.Fatalf("a cancelled wait: %v after %v", err, time.Since(t0))
	}
}
