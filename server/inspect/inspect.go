// Package inspect is the host as the web inspector sees it
// (docs/inspector.md): taps on one session's messages, a watch on every
// answer the host sends, what the host knows to be secret, the recorded
// trajectory of a session, and the audit line of each view. The kernel
// (package server) implements [Host] with a type of its own and hands it
// out through operator.Host.Inspect; this package imports no kernel package, so
// the dependency runs one way: server → server/inspect, and the inspector
// (server/inspector) needs only this package and the admin API.
//
// Nothing here costs the host anything until it is asked: a tap is
// installed on one session when a page subscribes to it and removed when
// the page leaves, and the watch exists only while a page shows the host.
// Without either, a message pays one atomic load of a nil pointer per
// hook (docs/PERFORMANCE.md, The inspector).
package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Message is one message a tapped session exchanged, given to the tap on
// the session's own goroutine the moment it was received or sent.
type Message struct {
	// Dir is agent (the agent sent it) or host.
	Dir string
	// Kind is request, notification, reply, event or error; invalid for
	// a line the host could not decode (Line holds it as received, cut
	// to MaxInvalidLine bytes); end when the session ended (no Line).
	Kind string
	// Type is the message's type ("" for an invalid line).
	Type string
	// ID is the message's id, ReqID the request a reply, event or error
	// answers.
	ID, ReqID string
	// At is when the host received or sent it.
	At time.Time
	// Line is the message as JSON. It is not redacted: it may hold any
	// secret the agent put in it, and the transport ids and tokens of
	// handshakes, forks and subagents.
	Line []byte
	// Known are the secrets the session could know when the message was
	// exchanged (the host token, its own and its tree's tokens, the
	// secrets declared for it and for the host): a secret a session
	// declared and forgot before the tap's reader got to the message is
	// here all the same. Shared: never modify it.
	Known []string
}

// MaxInvalidLine bounds the part of an undecodable line a tap is given.
const MaxInvalidLine = 4096

// Tapped is a tap installed on a session.
type Tapped struct {
	// Stop removes the tap; after it returns the tap is never called
	// again. Calling it twice is harmless.
	Stop func()
	// Tenant and AgentID name whose session it is.
	Tenant, AgentID string
	// Recorded says whether the host records the session's trajectory:
	// then what it exchanged before the tap is in [Host.Recorded].
	Recorded bool
	// Since is when the tap was installed.
	Since time.Time
	// Done is closed when the session ends; its last message to the tap
	// is of kind end.
	Done <-chan struct{}
}

// Event is what the watch is told: one answer a session sent (a reply or
// an error to a request, a pong, a handshake's answer) or the end of a
// session. It is given on the session's own goroutine and must be
// handled at once.
type Event struct {
	// Kind is answer or ended.
	Kind string
	// Session and Tenant name the session by its public handle and its
	// tenant ("" before its handshake).
	Session, Tenant string
	// Type is the answer's type (tool/call/resp, error, …).
	Type string
	// Code is "" for a success, the protocol error's code for an error
	// and a refused handshake, and the tool's error_code for a tool call
	// that failed (ToolFailed).
	Code       string
	ToolFailed bool
}

// Secrets is what the host knows to be secret now, for cutting out of what
// a page is shown.
type Secrets struct {
	// Gen changes whenever the lists below may have changed.
	Gen uint64
	// Values are the host token, every live session's own token (a
	// tenant's secret that opened it, a subagent's, a fork's or an
	// operator-opened session's), every declared secret (toolkit
	// passwords, MCP credentials) and every live session's transport id,
	// whole and its random part alone: at least 8 bytes each.
	Values []string
	// TenantHashes are the SHA-256 of every tenant's secrets, whose
	// values the host never holds: a string whose hash is one of them is
	// a tenant's secret.
	TenantHashes [][32]byte
}

// View is one view the operator opened, for its audit line.
type View struct {
	// Action names it: host (the host's sessions) or session (one
	// session's timeline); the audit line's type is inspector/<action>.
	Action string
	// Session is the public handle viewed and Tenant its tenant.
	Session, Tenant string
	// Target says what else was shown (live, recorded).
	Target string
	// Code is "" when the view opened, else why not (not_found, busy).
	Code    string
	Started time.Time
}

// ErrNoSession is the answer of [Host.Tap] for a handle no live session
// of this host has.
var ErrNoSession = errors.New("no live session has this handle")

// MaxTaps bounds the taps on one session.
const MaxTaps = 16

// ErrTooManyTaps refuses a tap beyond MaxTaps on one session.
var ErrTooManyTaps = errors.New("the session has as many inspector taps as it may")

// Host is what the inspector may ask of the host.
type Host interface {
	// Tap calls f with every message the session with this handle
	// exchanges from now on, until Tapped.Stop or the session's end. f
	// runs on the session's goroutines: it must not block, and it must
	// copy nothing it keeps but Message itself (Line is its own).
	Tap(handle string, f func(Message)) (Tapped, error)
	// Watch calls f with every answer any session sends and every
	// session's end, until stop. f runs on the sessions' goroutines: it
	// must not block.
	Watch(f func(Event)) (stop func())
	// Secrets returns what the host knows to be secret now.
	Secrets() Secrets
	// Recorded returns the newest records, at most limit, of the
	// trajectory the store holds for the session with this handle (live
	// or not), oldest first, each in the form of
	// schemas/records/trajectory.json, after writing the records still
	// queued; more says older ones were left out. A host without a store
	// returns none.
	Recorded(ctx context.Context, handle string, limit int) (recs []json.RawMessage, more bool, err error)
	// Audit writes the audit line of a view, with the operator as its
	// actor and type inspector/<action>.
	Audit(v View)
}
