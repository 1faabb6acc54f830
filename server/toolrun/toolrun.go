// Package toolrun holds the tool-execution mechanics shared by every plugin
// that serves tools (docs/DECISIONS.md, Dispatch): the host's tool policy, the per-call
// timeout, panic recovery, event collection, the output cap and duration_ms.
// A tool's failure always becomes a spec §2.6 result with success false and
// never an `error` message (spec §7, docs/DECISIONS.md, Wire), so plugins call [Run] and
// return its result as is.
package toolrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// DefaultMaxOutputBytes is the output cap when none is configured ( 1 MiB).
const DefaultMaxOutputBytes = 1 << 20

// DefaultMaxStreamBytes bounds what one streaming call sends in events when
// none is configured: 16 MiB, so a long build's live output still streams.
const DefaultMaxStreamBytes = 16 << 20

// maxEvents bounds the events one call collects, so a chatty tool cannot
// grow a result without limit; later events are still streamed but not kept.
// Their encoded size is bounded too, by the output cap (fitResult).
const maxEvents = 10000

// Subject is what the tool policy needs to know about the tool being called.
type Subject struct {
	Name string
	Tags []string
}

// Output is what a tool returns on success.
type Output struct {
	Data    any
	Summary any
	// ExitCode is set by process-based tools (spec §2.6).
	ExitCode *int
	// Truncated is set by tools that cut their own output at [MaxOutput].
	Truncated bool
}

// Func runs a tool. A returned error becomes a TOOL_ERROR result. An
// *[ExitError] carries an exit code into the failed result.
type Func func(ctx context.Context) (Output, error)

// ExitError is a failure of a process-based tool that still has an exit
// code and output worth returning.
type ExitError struct {
	Output Output
	Err    error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Options are the host-wide settings of tool runs.
type Options struct {
	// MaxOutputBytes caps the encoded reply, its collected events included,
	// and every event; 0 means the default (docs/DECISIONS.md, Output cap).
	MaxOutputBytes int
	// MaxStreamBytes bounds the events one streaming call sends on the
	// wire, summed; past it one status event says the stream was cut and
	// later events are not streamed (still collected within the output
	// cap). 0 means [DefaultMaxStreamBytes].
	MaxStreamBytes int
	// Policy is server.tool_policy (spec §5 rule 6).
	Policy server.ToolPolicy
	// Logger receives the stack of a panicking tool; nil discards it.
	Logger *slog.Logger
}

// Allowed reports whether the policy lets tool run. A pattern (path.Match
// syntax) matches the tool's name, or with the prefix "tag:" any of its tags.
// Deny wins; an empty allow list allows every tool (server.ToolPolicy).
func (p Options) Allowed(t Subject) (bool, string) {
	for _, pat := range p.Policy.Deny {
		if matches(pat, t) {
			return false, fmt.Sprintf("tool %q is denied by server.tool_policy (deny %q)", t.Name, pat)
		}
	}
	if len(p.Policy.Allow) == 0 {
		return true, ""
	}
	for _, pat := range p.Policy.Allow {
		if matches(pat, t) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("tool %q is not in server.tool_policy's allow list", t.Name)
}

// Deferred reports whether the policy's defer patterns match t (same
// pattern rules as [Options.Allowed]), which marks it defer_loading.
func (p Options) Deferred(t Subject) bool {
	for _, pat := range p.Policy.Defer {
		if matches(pat, t) {
			return true
		}
	}
	return false
}

func matches(pat string, t Subject) bool {
	if tag, ok := cutPrefix(pat, "tag:"); ok {
		for _, g := range t.Tags {
			if ok, _ := path.Match(tag, g); ok {
				return true
			}
		}
		return false
	}
	ok, _ := path.Match(pat, t.Name)
	return ok
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// Failure builds a failed result with the given code.
func Failure(name string, code msg.ToolResultErrorCode, text string) *msg.ToolResult {
	return &msg.ToolResult{Success: false, ToolName: name, ErrorCode: &code, Error: &text, Events: []msg.ToolEvent{}}
}

type collectorKey struct{}

// collector gathers the events of one call and forwards them to the wire
// when the caller asked for streaming (spec §6 rule 1, docs/DECISIONS.md, Wire).
type collector struct {
	mu        sync.Mutex
	scope     wire.Scope
	streaming bool
	events    []keptEvent
	kept      int  // encoded bytes of events
	dropped   bool // an event was not kept
	done      bool
	maxOutput int
	maxStream int
	streamed  int  // approximate encoded bytes of the events streamed
	cut       bool // the stream reached maxStream; nothing more goes out
}

// keptEvent is a collected event with the size of its encoding.
type keptEvent struct {
	ev   msg.ToolEvent
	size int
}

func (c *collector) emit(kind wire.EventKind, data map[string]any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return wire.ErrNotInFlight
	}
	if data == nil {
		data = map[string]any{}
	}
	// No event on the wire is over the cap: one that is has its strings cut.
	data = fitEventData(data, c.maxOutput-reserve(c.maxOutput))
	// Events are kept while they could still fit the result; fitResult
	// decides at the end what the data leaves room for.
	if len(c.events) < maxEvents && c.kept < c.maxOutput {
		ev := msg.ToolEvent{Kind: msg.ToolEventKind(kind), Data: msg.ToolEventData(data)}
		size := encodedSize(ev)
		c.events = append(c.events, keptEvent{ev: ev, size: size})
		c.kept += size
	} else {
		c.dropped = true
	}
	if !c.streaming || c.scope == nil || c.cut {
		return nil
	}
	size := approxSize(data)
	if c.streamed+size > c.maxStream {
		// The stream is cut: one last event says so and at how many bytes.
		c.cut = true
		return c.scope.Emit(wire.EventStatus, map[string]any{"message": fmt.Sprintf(
			"stream truncated after %d bytes of events (max_stream_bytes %d); later events are not streamed", c.streamed, c.maxStream),
			"truncated": true, "stream_bytes": c.streamed})
	}
	c.streamed += size
	return c.scope.Emit(kind, data)
}

// approxSize is an event's size on the wire, near enough to bound a stream
// by: its strings' bytes and a little for everything else and the envelope.
func approxSize(data map[string]any) int {
	n := 96
	for k, v := range data {
		n += len(k) + 4
		switch x := v.(type) {
		case string:
			n += len(x)
		case map[string]any:
			n += approxSize(x)
		default:
			n += 16
		}
	}
	return n
}

func (c *collector) finish() ([]keptEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	return c.events, c.dropped
}

// Emit records an event of the running tool: it is collected into the
// result's events and, when the call is streaming, sent as tool/event before
// the reply (spec §6). Outside a tool run it does nothing.
func Emit(ctx context.Context, kind wire.EventKind, data map[string]any) error {
	c, ok := ctx.Value(collectorKey{}).(*collector)
	if !ok {
		return nil
	}
	return c.emit(kind, data)
}

// Progress emits a progress event {pct, message}.
func Progress(ctx context.Context, pct int, message string) error {
	return Emit(ctx, wire.EventProgress, map[string]any{"pct": pct, "message": message})
}

// Status emits a status event {message}.
func Status(ctx context.Context, message string) error {
	return Emit(ctx, wire.EventStatus, map[string]any{"message": message})
}

// Log emits a log event {level, message}.
func Log(ctx context.Context, level, message string) error {
	return Emit(ctx, wire.EventLog, map[string]any{"level": level, "message": message})
}

// Artifact emits an artifact chunk {name, mime, chunk, final}.
func Artifact(ctx context.Context, name, mime, chunk string, final bool) error {
	return Emit(ctx, wire.EventArtifact, map[string]any{"name": name, "mime": mime, "chunk": chunk, "final": final})
}

// MaxOutput returns the room the running call's output cap leaves for the
// encoding of result.data (the cap less [EnvelopeReserve]), for tools that
// cut their own output (reading files, capturing process output). Such
// tools count encoded bytes ([EncodedLen], [CutEncoded]): what they keep
// then fits without being cut again.
func MaxOutput(ctx context.Context) int {
	if c, ok := ctx.Value(collectorKey{}).(*collector); ok {
		return c.maxOutput - reserve(c.maxOutput)
	}
	return DefaultMaxOutputBytes - EnvelopeReserve
}

// Run applies policy, timeout, panic recovery, event collection, the output
// cap and timing to one tool call and returns its spec §2.6 result; it never
// returns an error (spec §7: a tool failure is a result).
func Run(ctx context.Context, s wire.Scope, req *msg.ToolCallReq, t Subject, opt Options, fn Func) *msg.ToolResult {
	if ok, why := opt.Allowed(t); !ok {
		return Failure(t.Name, msg.ToolResultErrorCodeTOOLDENIED, why)
	}
	maxOut := opt.MaxOutputBytes
	if maxOut <= 0 {
		maxOut = DefaultMaxOutputBytes
	}
	maxStream := opt.MaxStreamBytes
	if maxStream <= 0 {
		maxStream = DefaultMaxStreamBytes
	}
	col := &collector{scope: s, streaming: req.Streaming, maxOutput: maxOut, maxStream: maxStream}
	ctx = context.WithValue(ctx, collectorKey{}, col)
	t0 := time.Now()
	var (
		out Output
		err error
	)
	if req.Timeout != nil && *req.Timeout > 0 {
		out, err = runWithTimeout(ctx, time.Duration(*req.Timeout*float64(time.Second)), opt.Logger, t.Name, fn)
	} else {
		out, err = protect(ctx, opt.Logger, t.Name, fn)
	}
	events, dropped := col.finish()
	res := &msg.ToolResult{ToolName: t.Name, DurationMs: int(time.Since(t0).Milliseconds())}
	var xe *ExitError
	if errors.As(err, &xe) {
		out = xe.Output
	}
	if err != nil {
		code := msg.ToolResultErrorCodeTOOLERROR
		text := wire.Text(err)
		res.ErrorCode, res.Error = &code, &text
	} else {
		res.Success = true
	}
	res.Data, res.Summary, res.ExitCode, res.Truncated = out.Data, out.Summary, out.ExitCode, out.Truncated || dropped
	// The cap bounds the whole result, events included (docs/SECURITY.md).
	fitResult(res, events, maxOut-reserve(maxOut))
	return res
}

// ErrTimeout is the cause of a call that ran past its timeout.
var ErrTimeout = errors.New("tool timed out")

// runWithTimeout runs fn on its own goroutine so that a tool that ignores its
// context still yields a TOOL_ERROR at the deadline; the tool's goroutine
// ends when it notices the cancelled context.
func runWithTimeout(ctx context.Context, d time.Duration, log *slog.Logger, name string, fn Func) (Output, error) {
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type res struct {
		out Output
		err error
	}
	ch := make(chan res, 1)
	go func() {
		o, err := protect(tctx, log, name, fn)
		ch <- res{o, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil && tctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return r.out, fmt.Errorf("%w after %s (timeout %gs): %v", ErrTimeout, d, d.Seconds(), r.err)
		}
		return r.out, r.err
	case <-tctx.Done():
		if ctx.Err() != nil {
			return Output{}, ctx.Err()
		}
		return Output{}, fmt.Errorf("%w after %s (timeout %gs)", ErrTimeout, d, d.Seconds())
	}
}

// protect turns a panic in a tool into a TOOL_ERROR instead of a
// runtime_error of the whole request; the result's text carries only the
// correlation id under which the panic and its stack were logged.
func protect(ctx context.Context, log *slog.Logger, name string, fn Func) (out Output, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = Output{}, server.Recovered(log, "tool "+name, v)
		}
	}()
	return fn(ctx)
}

func cutString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
