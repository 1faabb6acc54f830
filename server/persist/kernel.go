package persist

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/gen/msg"
)

// Kernel is what persistence asks of the kernel. The kernel implements
// it (server/persistence.go); nothing else does outside tests.
type Kernel interface {
	// LiveTopLevel returns the sessions that have handshaken, have not
	// ended and are no subagent's: what automatic snapshots and a drain
	// save (a subagent's state is in its parent's plugins' snapshots).
	LiveTopLevel() []Session
	// NewFork registers a new top-level session forked from src: counted
	// against the host's sessions from its creation, its tenant and
	// budgets src's, waiting for its handshake. nth and count (fork nth of
	// count) word its refusal, which is the error to answer with: the
	// host at its limits, or draining.
	NewFork(src Session, nth, count int) (Session, error)
	// Secrets returns the secrets the kernel knows for s: the host's
	// token, s's own token, and those plugins declared for the host and
	// for the sessions whose state a snapshot of s holds.
	Secrets(s Session) []Secret
	// DropState drops what the plugin named plugin keeps of the session
	// with public handle handle in its SessionState containers, before a
	// restore replaces that state.
	DropState(plugin, handle string)
	// SnapshotDone is told of every snapshot of s, written or not (the
	// host's metrics, server/observe.go, and the newest snapshot the
	// admin API reports, server/admin.go).
	SnapshotDone(s Session, r SnapshotReport)
	// Usage measures dir as the session budgets do (server/budget.go):
	// the bytes of its regular files and its entries.
	Usage(dir string) (bytes int64, entries int)
	// FilesRefusal is the files budget's refusal (server.budgets.files,
	// detail.reason files_budget), its message made of format and args.
	FilesRefusal(format string, args ...any) error
}

// Session is a kernel session as persistence sees it.
type Session interface {
	// ID is the transport id, a bearer secret: persistence keeps only
	// one-way digests of it (owner keys, stored.go) and hands it to no
	// one but the session that forked.
	ID() string
	// Handle is the session's public name, what plugins know it by.
	Handle() string
	// Identity is what a snapshot records of the session itself: the
	// agent id and the capabilities its handshake accepted.
	Identity() (agentID string, accepted []msg.CapabilityEntry)
	// DirOwner names the session whose directory this session sees (its
	// own, or the ancestor a shared or restricted subagent uses), and
	// whether it may only read it (spec §1, memory scopes).
	DirOwner() (owner string, readOnly bool)
	// TopLevel reports whether the session is no subagent's.
	TopLevel() bool
	// Tenant names the session's tenant as stored records carry it (""
	// for the default tenant): snapshots and trajectory records are its
	// tenant's, and no session of another tenant finds them.
	Tenant() string
	// Activity reports when the session was last active (Unix
	// nanoseconds) and whether it has requests in flight.
	Activity() (lastActive int64, busy bool)
	// Close ends the session (a fork that cannot be completed).
	Close()
	// Point is the session's point (docs/DECISIONS.md, Points): how many
	// state-changing requests it answered. A snapshot records the point
	// read before its state is taken, so it holds everything answered up
	// to there.
	Point() uint64
	// SetPoint sets the session's point: a restore's or a fork's
	// snapshot's, which its next replies carry.
	SetPoint(point uint64)
	// Ended reports whether the session has begun to end.
	Ended() bool
	// Unsaved is, for a top-level session, what of its tree's changes
	// is not yet in its automatic snapshot (crashwin.go).
	Unsaved() *Unsaved
}

// Unsaved records the changes of a top-level session's tree that are not
// yet in its automatic snapshot, as times in Unix nanoseconds, 0 for
// none. The kernel sets Since when it is 0 (a request started or was
// answered); a save moves it to Saving before it reads the session's
// state and clears Saving once the snapshot is written, so a change is
// unsaved until its save is in the store.
type Unsaved struct {
	Since  atomic.Int64 // the oldest change no save has read yet
	Saving atomic.Int64 // the oldest change the save under way holds
}

// oldest is the oldest change not yet in the store, 0 none.
func (u *Unsaved) oldest() int64 {
	a, b := u.Since.Load(), u.Saving.Load()
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// SnapshotReport is how taking one snapshot went.
type SnapshotReport struct {
	// Kind is why it was taken: [KindRequest], [KindDrain] or [KindAuto].
	Kind string
	// Target is file or sql.
	Target string
	// Began is when it began.
	Began time.Time
	// ID and Bytes are the snapshot written (its document and files
	// archive); Err is why none was, when none was.
	ID    string
	Bytes int
	Err   error
}

// Secret is a value no snapshot or trajectory may hold, with the words
// that name it in errors and logs, which never include it.
type Secret struct {
	What, Value string
}

// Plugin is a loaded plugin as persistence needs it: its configured name
// and type, its instance key (what a snapshot's state is matched by,
// stored.go) and its implementation, whose optional interfaces below are
// looked up once, at [Keeper.Start].
type Plugin struct {
	Name, Type, Key string
	Impl            any
}

// Snapshotter is implemented by plugins whose per-session state is saved in
// snapshots. Snapshot must leave out secrets; Restore replaces the session's
// state with the saved one.
type Snapshotter interface {
	Snapshot(ctx context.Context, sessionID string) ([]byte, error)
	Restore(ctx context.Context, sessionID string, state []byte) error
}

// Forker is implemented by a [Snapshotter] whose state comes to a fork
// otherwise than to a restore. RestoreFork restores state, taken from
// another session, into a new forked session, and returns what of that
// state the fork does not carry as it runs in the source (running
// processes, toolkits that need their secrets again); the kernel fills in
// each item's plugin. A Snapshotter that is not a Forker gets Restore.
type Forker interface {
	RestoreFork(ctx context.Context, sessionID string, state []byte) ([]msg.NotForked, error)
}

// FileHolder is implemented by plugins whose own processes write session
// directories (the sql toolkit's SQLite workers). Before a directory is
// copied — a sql snapshot's files, a fork, a snapshot-scoped subagent's
// copy — each is asked to bring what it keeps under dir to a consistent
// state (a database checkpointed into its main file) and to change
// nothing there until release is called.
type FileHolder interface {
	HoldFiles(ctx context.Context, dir string) (release func(), err error)
}

// SecretHolder is implemented by plugins that hold secrets (API keys,
// passwords from their config). Before a snapshot is written it is
// checked that none of them appears in it, as a defence behind each
// plugin's own duty to leave secrets out (docs/DECISIONS.md, State); a
// trajectory's records are cut of them.
type SecretHolder interface {
	Secrets() []string
}

// DecodeState decodes a [Snapshotter]'s state into v strictly (a field this
// build does not know is refused, not guessed at) after checking that its
// "version" field is version. what names the plugin in errors.
func DecodeState(what string, state []byte, version int, v any) error {
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(state, &head); err != nil {
		return fmt.Errorf("%s state: %w", what, err)
	}
	if head.Version == nil {
		return fmt.Errorf("%s state has no version; this host reads version %d", what, version)
	}
	if *head.Version != version {
		return fmt.Errorf("%s state version %d; this host reads version %d", what, *head.Version, version)
	}
	dec := json.NewDecoder(bytes.NewReader(state))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s state: %w", what, err)
	}
	return nil
}

// pluginAs is a loaded plugin seen through one of its interfaces.
type pluginAs[T any] struct {
	Plugin
	v T
}

// implementing returns the plugins whose implementation is a T, in start
// order.
func implementing[T any](ps []Plugin) []pluginAs[T] {
	var out []pluginAs[T]
	for _, p := range ps {
		if v, ok := p.Impl.(T); ok {
			out = append(out, pluginAs[T]{Plugin: p, v: v})
		}
	}
	return out
}
