package chains

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/expr-lang/expr"
	"github.com/tidwall/gjson"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

func secondsToDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// nodeError is a node's failure with the wire code it is reported under.
type nodeError struct {
	code    string
	message string
}

func (e *nodeError) Error() string { return e.code + ": " + e.message }

// nodeError turns n's failure into a code and message: wire errors keep
// their code (wire.AsError is the one mapping of causes to codes). A
// failure not meant for the agent (a panic, a fault of the host) goes to
// the log under a correlation id, and the reply names only that id, as the
// kernel's generic error does.
func (r *runner) nodeError(n *node, err error) *nodeError {
	var ne *nodeError
	if errors.As(err, &ne) {
		return ne
	}
	we := wire.AsError(err)
	if !we.Internal {
		return &nodeError{code: string(we.Code), message: we.Message}
	}
	var pe *server.PanicError
	corr := ""
	if errors.As(err, &pe) {
		corr = pe.Correlation // the panic and its stack are logged already
	} else {
		corr = "err-" + wire.RandomHex(8)
		r.log.Error("chain node error", "correlation", corr, "node", n.def.ID, "err", err)
	}
	return &nodeError{code: string(we.Code), message: "internal error; the host's log has it under correlation " + corr}
}

// result is what a node's goroutine hands back to the scheduler.
type result struct {
	n *node
	// stand is the failed node a fallback runs for; nil otherwise.
	stand *node
	out   json.RawMessage
	err   error
	start time.Time
}

// runner is one execution of a graph. Its maps are touched only by the
// scheduler goroutine (execute); node goroutines get a scope built from a
// copy and report through results.
type runner struct {
	ctx     context.Context
	s       wire.Scope
	log     *slog.Logger
	reg     *wire.Registry
	g       *graph
	input   json.RawMessage
	sem     chan struct{}
	results chan result

	outputs   map[string]json.RawMessage
	remaining map[*node]int
	live      map[*node]bool
	done      map[*node]bool // ran, skipped or failed
	running   map[*node]bool
	ran       []string
	skipped   []string
	failed    []msg.ChainNodeError
	finished  int
	stopped   bool
	abortErr  *msg.ChainNodeError
}

// execute runs g: roots first, then every node whose incoming edges have all
// settled, in parallel, until no node can run. Node failures and the
// timeout are answered in the reply (success false); only the end of the
// request's own context is an error.
func execute(ctx context.Context, s wire.Scope, reg *wire.Registry, log *slog.Logger, g *graph, input json.RawMessage, limit int, timeout time.Duration) (*msg.ChainRunResp, error) {
	began := time.Now()
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := &runner{
		ctx: cctx, s: s, log: log, reg: reg, g: g, input: input,
		sem: make(chan struct{}, limit),
		// Every node and every fallback sends at most one result, so
		// senders never block, even after the scheduler has returned.
		results:   make(chan result, 2*len(g.nodes)),
		outputs:   map[string]json.RawMessage{},
		remaining: map[*node]int{},
		live:      map[*node]bool{},
		done:      map[*node]bool{},
		running:   map[*node]bool{},
	}
	for _, n := range g.nodes {
		r.remaining[n] = len(n.in)
	}
	for _, n := range g.nodes {
		if !n.isFallback && len(n.in) == 0 {
			r.launch(n, nil, nil)
		}
	}
	timedOut := false
	for len(r.running) > 0 && !r.stopped && !timedOut {
		select {
		case res := <-r.results:
			delete(r.running, res.n)
			if res.err != nil && cctx.Err() != nil {
				// The node failed because the chain ran out of time or the
				// request ended: that is reported below, not as the node's.
				r.running[res.n] = true
				timedOut = true
				continue
			}
			r.settle(res)
		case <-cctx.Done():
			timedOut = true
		}
	}
	// Stop what still runs; nodes that ignore their context finish in the
	// background and their results are dropped (results is buffered).
	cancel()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("chain stopped: %w", ctx.Err())
	}
	stillRunning := func(code wire.Code, text string) {
		for _, n := range g.nodes {
			if r.running[n] {
				r.fail(n, &nodeError{code: string(code), message: text}, msg.ChainNodeErrorHandledAbort)
			}
		}
	}
	if r.stopped {
		stillRunning(wire.CodeCancelled, "stopped because node "+r.abortErr.Node+" failed")
	} else if timedOut {
		text := fmt.Sprintf("chain timed out after %s", timeout)
		stillRunning(wire.CodeTimeout, text)
		r.abortErr = &msg.ChainNodeError{Code: string(wire.CodeTimeout), Message: text}
	}
	// Nodes that never started because the chain stopped count as skipped,
	// so every node is reported once: ran, skipped or failed.
	for _, n := range g.nodes {
		if !r.done[n] && !r.running[n] {
			r.skipped = append(r.skipped, n.def.ID)
		}
	}
	resp := &msg.ChainRunResp{
		Success:     r.abortErr == nil,
		Outputs:     msg.ChainRunRespOutputs(r.outputs),
		FinalOutput: r.finalOutput(),
		Ran:         nonNil(r.ran),
		Skipped:     nonNil(r.skipped),
		Failed:      r.failed,
		Error:       r.abortErr,
		DurationMs:  int(time.Since(began).Milliseconds()),
	}
	if resp.Failed == nil {
		resp.Failed = []msg.ChainNodeError{}
	}
	return resp, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (r *runner) finalOutput() json.RawMessage {
	if r.g.output != "" {
		return rawOrNull(r.outputs[r.g.output])
	}
	got := map[string]json.RawMessage{}
	var last json.RawMessage
	for _, id := range r.g.sinks() {
		if o, ok := r.outputs[id]; ok {
			got[id] = o
			last = o
		}
	}
	switch len(got) {
	case 0:
		return json.RawMessage("null")
	case 1:
		return last
	}
	b, _ := json.Marshal(got)
	return b
}

// emit sends a chain/event; a failure to emit (the reply already went out
// after a timeout) does not concern the chain.
func (r *runner) emit(kind wire.EventKind, n *node, phase string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["node"] = n.def.ID
	data["phase"] = phase
	_ = r.s.Emit(kind, data)
}

// launch starts n; stand is the failed node a fallback stands in for, and
// failure its error (the fallback's scope sees it as error).
func (r *runner) launch(n *node, stand *node, failure *nodeError) {
	r.running[n] = true
	r.emit(wire.EventStatus, n, "start", map[string]any{"message": "node " + n.def.ID + " started", "kind": string(n.def.Kind)})
	extras := map[string]json.RawMessage{}
	if failure != nil {
		b, _ := json.Marshal(map[string]string{"node": stand.def.ID, "code": failure.code, "message": failure.message})
		extras["error"] = b
	}
	sc, err := newScope(r.input, r.outputs, extras)
	if n.def.Kind == msg.ChainNodeKindGather {
		// gather joins the outputs of the nodes leading to it that ran.
		joined := map[string]json.RawMessage{}
		for _, e := range n.in {
			if o, ok := r.outputs[e.from.def.ID]; ok {
				joined[e.from.def.ID] = o
			}
		}
		b, _ := json.Marshal(joined)
		r.results <- result{n: n, stand: stand, out: b, start: time.Now()}
		return
	}
	go func() {
		start := time.Now()
		var out json.RawMessage
		if err == nil {
			// Node goroutines are the chain's own, outside the kernel's
			// recover: one bad node must not take the host down.
			err = server.Protect(r.log, "chain node "+n.def.ID, func() (err error) {
				out, err = r.work(n, sc)
				return err
			})
		}
		r.results <- result{n: n, stand: stand, out: out, err: err, start: start}
	}()
}

// settle records a finished node and opens the nodes that waited on it.
func (r *runner) settle(res result) {
	n := res.n
	if res.err == nil {
		r.done[n] = true
		r.outputs[n.def.ID] = res.out
		r.ran = append(r.ran, n.def.ID)
		r.finished++
		r.emit(wire.EventProgress, n, "end", map[string]any{
			"pct":         min(100, r.finished*100/max(r.g.active, 1)),
			"message":     "node " + n.def.ID + " finished",
			"duration_ms": time.Since(res.start).Milliseconds(),
		})
		if res.stand != nil {
			// The fallback's output stands in for the failed node's.
			r.outputs[res.stand.def.ID] = res.out
			r.propagate(res.stand, res.out, true)
			return
		}
		r.propagate(n, res.out, true)
		return
	}
	ne := r.nodeError(n, res.err)
	switch {
	case n.policy == msg.ChainNodeOnErrorFallback && !r.stopped:
		r.fail(n, ne, msg.ChainNodeErrorHandledFallback)
		r.launch(n.fallback, n, ne)
	case n.policy == msg.ChainNodeOnErrorSkip:
		r.fail(n, ne, msg.ChainNodeErrorHandledSkip)
		target := n
		if res.stand != nil {
			target = res.stand
		}
		r.propagate(target, nil, false)
	default:
		r.fail(n, ne, msg.ChainNodeErrorHandledAbort)
		if r.abortErr == nil {
			r.abortErr = &msg.ChainNodeError{Node: n.def.ID, Code: ne.code, Message: ne.message}
		}
		r.stopped = true
	}
}

func (r *runner) fail(n *node, ne *nodeError, how msg.ChainNodeErrorHandled) {
	r.done[n] = true
	delete(r.running, n)
	r.finished++
	h := how
	r.failed = append(r.failed, msg.ChainNodeError{Node: n.def.ID, Code: ne.code, Message: ne.message, Handled: &h})
	r.emit(wire.EventLog, n, "fail", map[string]any{"level": "error", "message": "node " + n.def.ID + " failed: " + ne.message, "code": ne.code, "on_error": string(how)})
}

// propagate settles n's outgoing edges. ok is false for a node whose
// failure was skipped: its successors still run (its output is null), but
// a branch without an outcome takes neither side.
func (r *runner) propagate(n *node, out json.RawMessage, ok bool) {
	var outcome *bool
	if n.def.Kind == msg.ChainNodeKindBranch && ok {
		var b bool
		if json.Unmarshal(out, &b) == nil {
			outcome = &b
		}
	}
	for _, e := range n.out {
		live := true
		if n.def.Kind == msg.ChainNodeKindBranch {
			live = outcome != nil && *e.when == *outcome
		}
		r.arrive(e.to, live)
	}
}

// arrive settles one incoming edge of m; once all have, m runs if any was
// live and is skipped otherwise, which skips everything only it reaches.
func (r *runner) arrive(m *node, live bool) {
	r.remaining[m]--
	if live {
		r.live[m] = true
	}
	if r.remaining[m] > 0 || r.stopped {
		return
	}
	if r.live[m] {
		r.launch(m, nil, nil)
		return
	}
	r.done[m] = true
	r.finished++
	r.skipped = append(r.skipped, m.def.ID)
	r.emit(wire.EventStatus, m, "skip", map[string]any{"message": "node " + m.def.ID + " skipped"})
	for _, e := range m.out {
		r.arrive(e.to, false)
	}
}

// work computes the output of one node (not gather, which launch joins).
func (r *runner) work(n *node, sc scope) (json.RawMessage, error) {
	switch n.def.Kind {
	case msg.ChainNodeKindAction:
		return r.send(n, sc)
	case msg.ChainNodeKindBranch:
		env, err := sc.env()
		if err != nil {
			return nil, err
		}
		v, err := expr.Run(n.program, env)
		if err != nil {
			return nil, &nodeError{code: string(wire.CodeRuntimeError), message: "condition: " + err.Error()}
		}
		return json.Marshal(v)
	case msg.ChainNodeKindMap:
		return r.mapItems(n, sc)
	case msg.ChainNodeKindReduce:
		return r.reduce(n, sc)
	}
	return nil, fmt.Errorf("node kind %q has no work", n.def.Kind)
}

// items resolves a map's or reduce's items to an array.
func items(n *node, sc scope) ([]json.RawMessage, error) {
	raw, err := sc.render(*n.def.Items)
	if err != nil {
		return nil, err
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(raw, &arr); err != nil || arr == nil {
		return nil, &nodeError{code: string(wire.CodeSchemaViolation), message: fmt.Sprintf("items of node %s is not an array: %.100s", n.def.ID, raw)}
	}
	return arr, nil
}

// send builds the node's request from its templated body through the same
// decoder as an agent's line (required fields, types, schema checks), and
// dispatches it under the chain's concurrency limit.
func (r *runner) send(n *node, sc scope) (json.RawMessage, error) {
	body := json.RawMessage(`{}`)
	if n.def.Request.Body != nil {
		var err error
		if body, err = sc.render(*n.def.Request.Body); err != nil {
			return nil, err
		}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, &nodeError{code: string(wire.CodeSchemaViolation), message: "request body is not an object after templating"}
	}
	typ, _ := json.Marshal(n.reqType)
	fields["type"] = typ
	fields["id"] = json.RawMessage(`"chain-node"`)
	// The decoder requires the envelope of every line (spec §2.1); the
	// node's request is the host's own, so it carries the host's version
	// and the time it is sent.
	fields["proto"] = json.RawMessage(`"` + wire.ProtoVersion + `"`)
	fields["ts"] = json.RawMessage(strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', -1, 64))
	line, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	var scanned wire.Scanned
	_, req, err := r.reg.Decode(line, &scanned)
	if err != nil {
		return nil, err
	}
	select {
	case r.sem <- struct{}{}:
	case <-r.ctx.Done():
		return nil, r.ctx.Err()
	}
	resp, err := r.s.Dispatch(r.ctx, req)
	<-r.sem
	if err != nil {
		return nil, err
	}
	out, err := wire.Marshal(resp)
	if err != nil {
		return nil, err
	}
	return out, replyFailure(out)
}

// replyFailure reports a reply that says its request failed without being
// an error message: a tool result with success false (spec §7: tools report
// failure that way) or a nested chain's success false.
func replyFailure(out []byte) error {
	if r := gjson.GetBytes(out, "result.success"); r.Exists() && r.Type == gjson.False {
		code := gjson.GetBytes(out, "result.error_code").String()
		if code == "" {
			code = "TOOL_ERROR"
		}
		return &nodeError{code: code, message: gjson.GetBytes(out, "result.error").String()}
	}
	if r := gjson.GetBytes(out, "success"); r.Exists() && r.Type == gjson.False {
		code := gjson.GetBytes(out, "error.code").String()
		if code == "" {
			code = string(wire.CodeRuntimeError)
		}
		return &nodeError{code: code, message: gjson.GetBytes(out, "error.message").String()}
	}
	return nil
}

// mapItems sends the node's request once per item, at most the chain's
// limit at a time. The map itself holds no slot while its items wait for
// one, so a map cannot starve its own items (and internal requests bypass
// the session's admission queue, so max_parallel cannot either).
func (r *runner) mapItems(n *node, sc scope) (json.RawMessage, error) {
	arr, err := items(n, sc)
	if err != nil {
		return nil, err
	}
	outs := make([]json.RawMessage, len(arr))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	// spawn bounds the item goroutines alive at once; the chain's
	// semaphore, taken inside send, bounds the requests in flight.
	spawn := make(chan struct{}, cap(r.sem))
	for i, it := range arr {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop || r.ctx.Err() != nil {
			break
		}
		select {
		case spawn <- struct{}{}:
		case <-r.ctx.Done():
			continue // the check above ends the loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-spawn }()
			var out json.RawMessage
			err := server.Protect(r.log, fmt.Sprintf("chain node %s, item %d", n.def.ID, i), func() error {
				idx, _ := json.Marshal(i)
				isc, err := sc.with(map[string]json.RawMessage{"item": it, "index": idx})
				if err != nil {
					return err
				}
				out, err = r.send(n, isc)
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					ne := r.nodeError(n, err)
					firstErr = &nodeError{code: ne.code, message: fmt.Sprintf("item %d: %s", i, ne.message)}
				}
				return
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return json.Marshal(outs)
}

// reduce folds items with the node's expression, acc starting at initial.
func (r *runner) reduce(n *node, sc scope) (json.RawMessage, error) {
	arr, err := items(n, sc)
	if err != nil {
		return nil, err
	}
	env, err := sc.env()
	if err != nil {
		return nil, err
	}
	var acc any
	if n.def.Initial != nil {
		raw, err := sc.render(*n.def.Initial)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &acc); err != nil {
			return nil, err
		}
	}
	for i, it := range arr {
		if err := r.ctx.Err(); err != nil {
			return nil, err
		}
		var item any
		if err := json.Unmarshal(it, &item); err != nil {
			return nil, err
		}
		env["acc"], env["item"], env["index"] = acc, item, i
		acc, err = expr.Run(n.program, env)
		if err != nil {
			return nil, &nodeError{code: string(wire.CodeRuntimeError), message: fmt.Sprintf("expr at item %d: %v", i, err)}
		}
	}
	return json.Marshal(acc)
}
