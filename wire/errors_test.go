package wire_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aephost/aep/wire"
)

// AsError is the one place where causes become wire codes; its message is
// the cause's text, without the ErrInvalid sentinel's words, which the
// schema_violation code already says.
func TestAsError(t *testing.T) {
	own := &wire.Error{Code: wire.CodeCapabilityMissing, Message: "kept as is"}
	tests := []struct {
		name string
		err  error
		code wire.Code
		msg  string
	}{
		{"protocol error passes through", fmt.Errorf("wrapped: %w", own), wire.CodeCapabilityMissing, "kept as is"},
		{"field error", &wire.FieldError{Field: "a.b", Reason: "must be positive"}, wire.CodeSchemaViolation, `field "a.b": must be positive`},
		{"invalid, suffix", fmt.Errorf("skill %q: unknown skill: %w", "x", wire.ErrInvalid), wire.CodeSchemaViolation, `skill "x": unknown skill`},
		{"invalid, prefix", fmt.Errorf("%w: no chain named %q", wire.ErrInvalid, "c"), wire.CodeSchemaViolation, `no chain named "c"`},
		{"invalid, middle", fmt.Errorf("spawn: scope %q: %w: want one of a, b", "z", wire.ErrInvalid), wire.CodeSchemaViolation, `spawn: scope "z": want one of a, b`},
		{"invalid alone", wire.ErrInvalid, wire.CodeSchemaViolation, "invalid input"},
		// A limit's text reaches the agent only when a plugin made it
		// public; a backend's words (a DSN, a path) get the code's fixed
		// text, and the kernel logs them under a correlation id.
		{"timeout, public", wire.Public(fmt.Errorf("step: %w", wire.ErrTimeout)), wire.CodeTimeout, "step: timed out"},
		{"out of memory, public", wire.Public(fmt.Errorf("run: %w", wire.ErrOutOfMemory)), wire.CodeOutOfMemory, "run: out of memory"},
		{"sandbox crash, public", wire.Public(fmt.Errorf("crashed: %w", wire.ErrSandboxCrash)), wire.CodeSandboxCrash, "crashed: sandbox crashed"},
		{"timeout, internal", fmt.Errorf("dial postgres://u:pw@db/x: %w", wire.ErrTimeout), wire.CodeTimeout, "timed out"},
		{"deadline, internal", fmt.Errorf("read /srv/aep/x: %w", context.DeadlineExceeded), wire.CodeTimeout, "timed out"},
		{"out of memory, internal", fmt.Errorf("mmap /srv/aep/x: %w", wire.ErrOutOfMemory), wire.CodeOutOfMemory, "out of memory"},
		{"sandbox crash, internal", fmt.Errorf("init /usr/local/bin/aep: %w", wire.ErrSandboxCrash), wire.CodeSandboxCrash, "the sandbox crashed"},
		{"cancelled", wire.ErrCancelled, wire.CodeCancelled, "request cancelled"},
		{"overloaded", wire.ErrOverloaded, wire.CodeRuntimeError, "session overloaded"},
		{"not found", fmt.Errorf("proc %q: %w", "p1", wire.ErrNotFound), wire.CodeRuntimeError, `proc "p1"`},
		{"denied", fmt.Errorf("episode limit reached: %w", wire.ErrDenied), wire.CodeRuntimeError, "episode limit reached"},
		{"public", fmt.Errorf("chain: %w", wire.Public(errors.New("no node n1"))), wire.CodeRuntimeError, "chain: no node n1"},
		{"reason", wire.Reason("step_limit", errors.New("step limit 3 reached")), wire.CodeRuntimeError, "step limit 3 reached"},
		// Any other error's text may hold a path or a DSN: it never
		// reaches the wire (the kernel logs it under a correlation id).
		{"anything else", errors.New("open /srv/aep/aep.db: disk on fire"), wire.CodeRuntimeError, "internal error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := wire.AsError(tc.err)
			if got.Code != tc.code || got.Message != tc.msg {
				t.Fatalf("AsError = %s %q, want %s %q", got.Code, got.Message, tc.code, tc.msg)
			}
			if got != own && !errors.Is(got, tc.err) && got.Err != tc.err {
				t.Fatalf("the cause is lost: %#v", got)
			}
			if got.Internal != (tc.name == "anything else" || strings.HasSuffix(tc.name, ", internal")) {
				t.Fatalf("Internal = %v", got.Internal)
			}
		})
	}
}

// Text is what AsError uses for schema_violation messages, and what a
// failed tool result says (server/toolrun).
func TestText(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("path %q contains a NUL byte: path refused: %w", "x", wire.ErrInvalid), `path "x" contains a NUL byte: path refused`},
		{errors.New("plain: invalid input"), "plain: invalid input"}, // not the sentinel: kept
		{fmt.Errorf("%w", wire.ErrInvalid), "invalid input"},
	} {
		if got := wire.Text(tc.err); got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
