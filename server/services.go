package server

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
)

// The kernel's services for plugins: per-session state that the kernel
// cleans up, panic-safe code, and a logger that is never nil. They
// replace the copies each stateful plugin used to carry.

// SessionState holds one value of type T per session for one plugin. The
// kernel runs its cleanup when the session ends, and before the plugin
// restores a snapshot into the session (a restore replaces the state), so
// a plugin never writes that bookkeeping itself. It is safe for concurrent use.
type SessionState[T any] struct {
	mu      sync.Mutex
	m       map[string]*T
	create  func(sessionID string) *T
	cleanup func(sessionID string, v *T)
	host    *Host
}

// NewSessionState returns a container for the plugin env belongs to.
// create makes a session's value on first use (nil: new(T)); cleanup, when
// non-nil, releases a value the kernel drops (it runs outside the
// container's lock, once per value).
func NewSessionState[T any](env PluginEnv, create func(sessionID string) *T, cleanup func(sessionID string, v *T)) *SessionState[T] {
	if create == nil {
		create = func(string) *T { return new(T) }
	}
	st := &SessionState[T]{m: map[string]*T{}, create: create, cleanup: cleanup, host: env.Host}
	if env.Host != nil {
		env.Host.addStateHook(env.Name, st.Drop)
	}
	return st
}

// ErrSessionEnded is the cause when state is asked for a session the host
// no longer has: a late goroutine must not recreate what the kernel dropped.
var ErrSessionEnded = errors.New("session ended")

// Get returns the session's value, if it has one.
func (st *SessionState[T]) Get(sessionID string) (*T, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	v, ok := st.m[sessionID]
	return v, ok
}

// GetOrCreate returns the session's value, making it on first use. It
// fails with [ErrSessionEnded] for a session the host does not know.
func (st *SessionState[T]) GetOrCreate(sessionID string) (*T, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if v, ok := st.m[sessionID]; ok {
		return v, nil
	}
	if st.host != nil {
		if _, live := st.host.SessionByHandle(sessionID); !live {
			return nil, fmt.Errorf("session state: %w", ErrSessionEnded)
		}
	}
	v := st.create(sessionID)
	st.m[sessionID] = v
	return v, nil
}

// Each calls fn for every session's value, in no order, on a copy of the
// set taken under the lock (fn may call the container).
func (st *SessionState[T]) Each(fn func(sessionID string, v *T)) {
	st.mu.Lock()
	ids := make([]string, 0, len(st.m))
	vals := make([]*T, 0, len(st.m))
	for id, v := range st.m {
		ids = append(ids, id)
		vals = append(vals, v)
	}
	st.mu.Unlock()
	for i := range ids {
		fn(ids[i], vals[i])
	}
}

// Len returns how many sessions have a value.
func (st *SessionState[T]) Len() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.m)
}

// Drop removes the session's value and runs the cleanup on it. The kernel
// calls it; a plugin may too (for example when a restore brings nothing).
func (st *SessionState[T]) Drop(sessionID string) {
	st.mu.Lock()
	v, ok := st.m[sessionID]
	delete(st.m, sessionID)
	st.mu.Unlock()
	if ok && st.cleanup != nil {
		st.cleanup(sessionID, v)
	}
}

// DropAll drops every session's value (a plugin's Cleanup).
func (st *SessionState[T]) DropAll() {
	st.Each(func(id string, _ *T) { st.Drop(id) })
}

// addStateHook records a container's Drop under its plugin's name.
func (h *Host) addStateHook(plugin string, drop func(sessionID string)) {
	h.hooksMu.Lock()
	defer h.hooksMu.Unlock()
	if h.stateHooks == nil {
		h.stateHooks = map[string][]func(string){}
	}
	h.stateHooks[plugin] = append(h.stateHooks[plugin], drop)
}

// dropState runs the state hooks of one plugin ("" for every plugin) for a session.
func (h *Host) dropState(plugin, sessionID string) {
	h.hooksMu.Lock()
	var hooks []func(string)
	for name, hs := range h.stateHooks {
		if plugin == "" || name == plugin {
			hooks = append(hooks, hs...)
		}
	}
	h.hooksMu.Unlock()
	for _, drop := range hooks {
		drop(sessionID)
	}
}

// PanicError is the error a recovered panic becomes: its text carries only
// the correlation id under which the panic value and stack were logged.
type PanicError struct {
	Correlation string
	What        string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("%s panicked (correlation %s)", e.What, e.Correlation)
}

// Protect runs fn and turns a panic into a [*PanicError]: the panic value
// and the stack go to log under a new correlation id, never to the wire.
// what names the code that ran ("tool read_file", "chain node n1").
func Protect(log *slog.Logger, what string, fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = Recovered(log, what, v)
		}
	}()
	return fn()
}

// Recovered logs a panic value that a deferred recover() returned, with
// the stack, under a new correlation id, and returns the error that stands
// for it. Hot paths that cannot afford [Protect]'s closure call it from
// their own deferred function. A nil log drops the record (a tool run
// without a host, as in a package's own tests), never the error.
func Recovered(log *slog.Logger, what string, v any) *PanicError {
	corr := newCorrelation()
	if log == nil {
		return &PanicError{Correlation: corr, What: what}
	}
	log.Error("panic", "correlation", corr, "in", what, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return &PanicError{Correlation: corr, What: what}
}

func newCorrelation() string { return "err-" + rand16() }
