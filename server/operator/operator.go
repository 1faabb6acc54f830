// Package operator is the host as its operator acts on it: the admin
// API's entry points into the kernel (docs/operating.md, Admin API;
// served on the operator listener by server/httpapi/admin.go), the
// reports they return, and what a transport implements so that a session
// the operator terminated tells its client why.
//
// The kernel (package server) implements [Host] with a type of its own
// and hands it out as server.Host.Operator; this package imports no
// kernel package, so the dependency runs one way: server →
// server/operator. Draining is server.Host.Drain (the SIGTERM drain)
// followed by [Host.EndSessions]; reloading the tenants is
// server.Host.ReloadTenants, as SIGHUP does.
package operator

import (
	"context"
	"errors"
	"time"

	"github.com/aephost/aep/gen/msg"
)

// Host is what the operator may do to a host's sessions. Every session is
// named by its public handle (never its transport id, a bearer secret),
// except in WasTerminated, which answers a transport about an id it was
// sent.
type Host interface {
	// Sessions lists the host's sessions, oldest first, at most limit of
	// them (limit ≤ 0: all), with their budgets. Sessions an agent
	// opened that wait for their handshake are anyone's to open and are
	// only counted (pending); host-made ones waiting for their agent (a
	// subagent's, a fork, an operator's) are listed. total is how many
	// would be listed without the limit.
	Sessions(limit int) (list []SessionReport, total, pending int)
	// Session describes the session with this handle, or fails with
	// ErrNoSuchSession.
	Session(handle string) (SessionReport, error)
	// Snapshots lists the stored snapshots the session with this handle
	// may restore or list as its own (its own and its lineage's), newest
	// first, at most limit.
	Snapshots(ctx context.Context, handle string, limit int) ([]SnapshotNote, error)
	// Terminate ends the session with this handle at the operator's
	// word: requests in flight are answered runtime_error with
	// detail.reason terminated, its processes and subagents end with it
	// (as at any session end: every plugin drops its state), its
	// transport id is unknown from then on, and a client holding a
	// connection ([ConnectionSink]) gets the same answer to its next
	// request for a while before the connection closes. It returns the
	// session as it was just before, or fails with ErrNoSuchSession.
	Terminate(handle string) (SessionReport, error)
	// WasTerminated reports whether the session with transport id id was
	// terminated by the operator in the last ten minutes: transports
	// answer its id with a 404 that says so (a client must not move it).
	WasTerminated(id string) bool
	// Snapshot snapshots the session with this handle to target ("sql"
	// or "file"; "" takes sql when the host has a store, else file), as
	// session/snapshot would at the session's request; any session may
	// restore the id it returns (session/restore/req snapshot_id).
	Snapshot(ctx context.Context, handle, target string) (SnapshotTaken, error)
	// Open opens a session for the tenant with this name (ErrNoSuchTenant
	// when the host has none): it waits for an agent to attach by its id
	// on any transport (as a subagent's session does) and to handshake
	// with the returned token within server.limits.handshake_timeout. The
	// tenant's capabilities, budgets and totals apply; caps, when given,
	// narrow the capabilities further. session/info marks it
	// operator_opened, and audit lines of its requests carry [Actor]. A
	// host that opens no session now fails with ErrUnavailable.
	Open(tenant string, caps []string) (OpenedSession, error)
	// EndSessions ends the sessions with these handles, as the host's
	// close would: after a drain that saved them (their snapshots are in
	// the store), so their clients move to another host and restore
	// them. It returns how many it ended.
	EndSessions(handles []string) int
	// Undrain ends a drain: the host accepts new sessions again, /readyz
	// answers 200 (its store permitting), and sessions a snapshotting
	// drain sealed and left open admit requests again. It reports
	// whether the host was draining.
	Undrain() bool
	// Audit writes the audit line of an admin action, with [Actor] as
	// its actor and type admin/<action>. It goes to the audit log only:
	// in-process audit subscribers follow agents' requests.
	Audit(a Action)
}

// ErrNoSuchSession is the answer for a handle no session has.
var ErrNoSuchSession = errors.New("no session has this handle")

// ErrNoSuchTenant refuses to open a session for a tenant the host does not
// have.
var ErrNoSuchTenant = errors.New("no tenant has this name")

// ErrUnavailable is why Open opened no session now: the host is draining
// or closing, or it or the tenant is at its total of sessions. The error
// Open returns keeps the kernel's own message, which says which.
var ErrUnavailable = errors.New("the host opens no session now")

// Actor is the actor of admin actions and of the requests of sessions the
// operator opened (and of their subagents), in audit lines.
const Actor = "operator"

// SessionReport is what the operator is told of one session: names,
// owner, state and use, never its transport id (a bearer secret).
type SessionReport struct {
	Handle string
	// Tenant is empty while a session opened by an agent waits for its
	// handshake (its secret names the tenant).
	Tenant  string
	AgentID string
	// State is pending (waiting for its handshake), live, draining (after
	// shutdown) or closed.
	State string
	// Transport is http, websocket, stdio, inprocess, subagent, other, or
	// none for a host-made session no client attached to yet.
	Transport      string
	Created        time.Time
	LastActive     time.Time
	InFlight       int
	ParentHandle   string
	OperatorOpened bool
	Forked         bool
	// Capabilities are the capabilities enabled by the handshake.
	Capabilities []string
	// Budgets are the session's budgets and their use, for a handshaken
	// session.
	Budgets *msg.SessionBudgets
	// Newest is the newest snapshot this host wrote of the session.
	Newest *SnapshotNote
}

// SnapshotNote names one snapshot of a session.
type SnapshotNote struct {
	ID     string
	Target string // file or sql
	Kind   string // request, drain or auto
	At     time.Time
	Bytes  int
}

// SnapshotTaken says what an operator's snapshot wrote.
type SnapshotTaken struct {
	SnapshotNote
	Files *msg.SnapshotFiles
}

// OpenedSession is a session the operator opened for a tenant.
type OpenedSession struct {
	// ID is the session's transport id (a bearer secret), Token the one
	// secret its handshake accepts: the host made it for this session
	// alone, so no tenant secret is needed or sent.
	ID, Token string
	Handle    string
	Tenant    string
	// Expires is when the session ends unless an agent attached to it
	// and handshook (server.limits.handshake_timeout).
	Expires time.Time
}

// Action is one admin action, for its audit line.
type Action struct {
	// Action names it: sessions.list, session.inspect, session.terminate,
	// session.snapshot, session.open, drain, undrain, reload.
	Action string
	// Session is the public handle acted on, and Tenant its tenant.
	Session, Tenant string
	// Target is what else the action names (a snapshot id).
	Target string
	// Code is "" on success, else what the API answered (not_found, …).
	Code     string
	Started  time.Time
	Duration time.Duration
}

// ConnectionSink is implemented by a transport's sink (a server.Sink)
// that holds a client's connection, which may outlive its session (a
// WebSocket). When the operator terminated the session, the kernel calls
// SessionTerminated and closes the sink only some time later (the
// WebSocket re-attach grace), answering the requests that arrive
// meanwhile runtime_error with detail.reason terminated; other sinks
// close at once (HTTP: the session id is then unknown, 404).
type ConnectionSink interface {
	// SessionTerminated tells the sink, before the kernel closes it, that
	// its session ended because the operator terminated it, so that the
	// connection's close can say so.
	SessionTerminated()
}
