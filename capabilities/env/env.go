// Package env is the env capability (spec §1 table, 4.2): RL-style episodes
// of registered environments — reset, step, observe, render, close and a
// batched step with Gymnasium's autoreset modes — plus the task-data plane
// on each session's own data root. It registers the plugin module
// `aep.env.builtin`.
//
// An environment author implements [Env] for an action type A and registers
// it with [Register]; actions arrive as raw JSON and are decoded straight
// into A, with no generic map on the hot path (docs/DECISIONS.md, Performance).
package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/aephost/aep/wire"
)

// Env is one episode's environment with actions of type A. The host calls
// its methods from one goroutine at a time.
//
// An error an Env returns is its answer to the agent: its text reaches the
// wire as a runtime_error (with detail.reason "invalid_action" for
// [ErrBadAction]), so it
// must not name host paths or secrets. A panic is not an answer: the agent
// gets a generic error with a correlation id and the episode is closed.
type Env[A any] interface {
	// Reset starts a new episode. A nil seed continues the environment's
	// random state; the same seed must give the same trajectory for the
	// same actions.
	Reset(ctx context.Context, seed *int64, options json.RawMessage) (Obs, error)
	// Step applies one action. Errors wrapping [ErrBadAction] are the
	// caller's fault and leave the episode as it was.
	Step(ctx context.Context, action A) (Step, error)
	// Render describes the current state as text.
	Render() (string, error)
	// Close frees the episode's resources.
	Close() error
}

// Stateful is implemented by environments whose state can be saved in a
// session snapshot; the state must include the random state so a restored
// episode continues the same trajectory. Episodes of other environments come
// back closed (docs/DECISIONS.md, State).
type Stateful interface {
	SaveState() ([]byte, error)
	LoadState(state []byte) error
}

// Obs is what Reset returns. Observation and Info are JSON; see [JSON].
type Obs struct {
	Observation json.RawMessage
	Info        json.RawMessage
}

// Step is what Step returns.
type Step struct {
	Observation json.RawMessage
	Info        json.RawMessage
	Reward      float64
	// Terminated: the episode reached a terminal state of its task.
	Terminated bool
	// Truncated: the episode was cut short, e.g. by a step limit.
	Truncated bool
}

// Spec describes an environment to clients (env/list, env/spaces).
type Spec struct {
	// Name is the environment id clients pass as env_name.
	Name        string
	Description string
	// ActionSpace and ObservationSpace are JSON Schema documents.
	ActionSpace      json.RawMessage
	ObservationSpace json.RawMessage
	// Inline marks a Step that is short, CPU-bound work: it runs on the
	// request's goroutine and the per-step timeout is not enforced by a
	// watchdog. Leave it false for anything that may block.
	Inline bool
}

// ErrBadAction marks an action (or reset options) the environment cannot
// take. Its action space is the environment's, not the contract's, so it
// reaches the wire as runtime_error with detail.reason "invalid_action",
// never schema_violation (docs/DECISIONS.md, Errors of state).
var ErrBadAction = wire.Reason("invalid_action", errors.New("bad action"))

// JSON encodes v for an Obs or Step field; it panics only on values that
// cannot be JSON (channels, functions), which are programming errors.
func JSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("env: observation is not JSON: %v", err))
	}
	return b
}

// instance is an environment with its action type erased.
type instance interface {
	reset(ctx context.Context, seed *int64, options json.RawMessage) (Obs, error)
	step(ctx context.Context, action json.RawMessage) (Step, error)
	render() (string, error)
	close() error
	stateful() Stateful
}

// typed adapts an Env[A] to instance, decoding actions into A.
type typed[A any] struct{ env Env[A] }

func (t typed[A]) reset(ctx context.Context, seed *int64, o json.RawMessage) (Obs, error) {
	obs, err := t.env.Reset(ctx, seed, o)
	return obs, answer(err)
}

func (t typed[A]) step(ctx context.Context, raw json.RawMessage) (Step, error) {
	var a A
	if err := decodeAction(raw, &a); err != nil {
		return Step{}, fmt.Errorf("action %s: %w: %v", clip(raw), ErrBadAction, err)
	}
	if v, ok := any(&a).(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return Step{}, fmt.Errorf("action: %w: %v", ErrBadAction, err)
		}
	}
	st, err := t.env.Step(ctx, a)
	return st, answer(err)
}

func (t typed[A]) render() (string, error) {
	text, err := t.env.Render()
	return text, answer(err)
}

// answer marks an error an environment returned as written for the agent
// (see [Env]). Errors that already say how they reach the wire (a
// sentinel such as [ErrBadAction], a protocol error), a context's end, and
// a host fault of the built-in task environment pass unchanged.
func answer(err error) error {
	var hf hostFault
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.As(err, &hf), !wire.AsError(err).Internal:
		return err
	}
	return wire.Public(err)
}

// hostFault is an error of an environment's host-side work (a work
// directory, starting files copied from the task folder): its text names
// host paths, so it stays generic on the wire and goes to the host's log.
type hostFault struct{ err error }

func (e hostFault) Error() string { return e.err.Error() }
func (e hostFault) Unwrap() error { return e.err }
func (t typed[A]) close() error   { return t.env.Close() }
func (t typed[A]) stateful() Stateful {
	s, _ := t.env.(Stateful)
	return s
}

// decodeAction decodes raw into *a; scalar action types skip reflection.
func decodeAction[A any](raw json.RawMessage, a *A) error {
	switch p := any(a).(type) {
	case *int:
		v, err := strconv.Atoi(string(raw))
		if err != nil || !jsonNumber(raw, true) {
			return errors.New("want an integer")
		}
		*p = v
		return nil
	case *int64:
		v, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || !jsonNumber(raw, true) {
			return errors.New("want an integer")
		}
		*p = v
		return nil
	case *float64:
		v, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || !jsonNumber(raw, false) {
			return errors.New("want a number")
		}
		*p = v
		return nil
	case *bool:
		switch string(raw) {
		case "true":
			*p = true
		case "false":
			*p = false
		default:
			return errors.New("want a boolean")
		}
		return nil
	}
	return json.Unmarshal(raw, a)
}

// jsonNumber reports whether raw is a JSON number (RFC 8259 section 6),
// and an integer one (no fraction or exponent) if integer is set. strconv
// also takes Go's own syntax ("+5", "05", "0x1p4", "1_000", ".5", "Inf",
// "NaN"), and the direct codec hands actions over unparsed, so without
// this check the fast paths accepted what the JSON decoder of every other
// action type refuses, NaN and infinities among them (found by
// FuzzDecodeAction).
func jsonNumber(raw []byte, integer bool) bool {
	i, n := 0, len(raw)
	digits := func() int {
		start := i
		for i < n && raw[i] >= '0' && raw[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < n && raw[i] == '-' {
		i++
	}
	switch {
	case i < n && raw[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if integer {
		return i == n
	}
	if i < n && raw[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < n && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < n && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == n
}

func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// factory builds instances of one environment.
type factory struct {
	spec Spec
	// new returns a fresh instance for an episode of the session.
	new func(sessionID string) (instance, error)
	// timeout, when set, replaces the plugin's step_timeout for this
	// environment (external environments bound their calls themselves).
	timeout time.Duration
}

var (
	registryMu sync.RWMutex
	registry   = map[string]*factory{}
)

// Register makes an environment available to every env plugin that does
// not restrict its `envs`. newEnv returns a fresh environment for each
// episode. It panics on an empty or duplicate name, at init, where the
// mistake is made.
func Register[A any](spec Spec, newEnv func() Env[A]) {
	if spec.Name == "" || newEnv == nil {
		panic("env: Register needs a name and a constructor")
	}
	if len(spec.ActionSpace) == 0 {
		spec.ActionSpace = json.RawMessage(`{}`)
	}
	if len(spec.ObservationSpace) == 0 {
		spec.ObservationSpace = json.RawMessage(`{}`)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[spec.Name]; dup {
		panic(fmt.Sprintf("env: environment %q registered twice", spec.Name))
	}
	registry[spec.Name] = &factory{spec: spec, new: func(string) (instance, error) { return typed[A]{newEnv()}, nil }}
}

// Registered returns the names of registered environments, sorted.
func Registered() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func lookupRegistered(name string) (*factory, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	f, ok := registry[name]
	return f, ok
}
