// Package subagents is the `subagents` capability (spec §1: subagent
// paragraph): module `aep.subagents.builtin`, serving
// subagent/spawn, list, status and terminate (schemas/subagents.json).
//
// A subagent is a child session that the kernel creates
// ([server.Host.SpawnChild]) with its own handshake token, a subset of its
// parent's capabilities, a depth in the session tree and a step limit, all
// enforced by the kernel. Its working memory view is set by the memory
// capability, which the kernel tells of every spawn (server.ChildObserver),
// so this package never looks another plugin up (spec §1 dispatch rule 5).
// The agent of a subagent reaches the child session by its id over any
// transport and handshakes with the token (docs/DECISIONS.md, Transports).
//
// This plugin keeps the records: one per subagent, from its spawn until
// the top-level session of its tree closes, so ancestors can list and
// inspect subagents that ended. Snapshots save the records of the
// sender's subtree; a restore brings them back as ended, since a child
// session, its connection and its token do not survive (docs/DECISIONS.md).
package subagents

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/wire"
)

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module aep.subagents.builtin, the subagents capability,
// named subagents.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: "aep.subagents.builtin", Capability: "subagents", DefaultName: "subagents.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// Defaults of the plugin's settings.
const (
	DefaultMaxDepth        = 3
	DefaultDefaultMaxSteps = 40 // the prior SDK's max_steps default
	DefaultMaxSteps        = 10000
	DefaultMaxChildren     = 16
	DefaultMaxEnded        = 256
)

// Record statuses (schemas/subagents.json SubagentRecord).
const (
	StatusWaiting    = "waiting"
	StatusRunning    = "running"
	StatusDraining   = "draining"
	StatusEnded      = "ended"
	StatusTerminated = "terminated"
)

// ErrUnknownSubagent is the cause when an id is not one of the sender's
// descendants (spec §5 rule 4: others' subagents are not visible).
var ErrUnknownSubagent = fmt.Errorf("unknown subagent_id: not a subagent of this session: %w", wire.ErrNotFound)

// Plugin serves the subagent namespace. Its exported fields with yaml tags
// are its settings.
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/subagents.json, docs/config.md).
	Settings `yaml:",inline"`

	host *server.Host

	spawnMu sync.Mutex // serialises the children count and the spawn
	mu      sync.Mutex
	// tree holds the records under each parent session id, in spawn order.
	// It is not a server.SessionState: a record outlives its own session
	// (ancestors list ended subagents until the tree's top-level session
	// closes), and a restore keeps the live records, which the kernel's
	// drop before Restore would discard (docs/DECISIONS.md, Subagent
	// records are not session state).
	// Restored records all sit under the session restored into and are not
	// descended into (their ids may be those of another live tree).
	tree map[string][]*record
	// live indexes the records whose session has not ended, by id.
	live map[string]*record
}

// record is one subagent.
type record struct {
	ID, Name, ParentID, Scope string
	Caps                      []string
	Depth, MaxDepth, MaxSteps int
	Steps                     int // while sess is nil
	Status, Reason            string
	Created, Ended            time.Time
	Restored                  bool
	sess                      *server.Session // nil once ended
}

// Provision applies defaults and keeps the host.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	if env.Host == nil {
		return errors.New("subagents needs the host (PluginEnv.Host)")
	}
	p.host = env.Host
	if p.MaxDepth == 0 {
		p.MaxDepth = DefaultMaxDepth
	}
	if p.DefaultMaxSteps == 0 {
		p.DefaultMaxSteps = DefaultDefaultMaxSteps
	}
	if p.MaxSteps == 0 {
		p.MaxSteps = DefaultMaxSteps
	}
	if p.MaxChildren == 0 {
		p.MaxChildren = DefaultMaxChildren
	}
	if p.MaxEnded == 0 {
		p.MaxEnded = DefaultMaxEnded
	}
	p.tree, p.live = map[string][]*record{}, map[string]*record{}
	return nil
}

// Validate checks the settings.
func (p *Plugin) Validate() error {
	switch {
	case p.MaxDepth < 1:
		return fmt.Errorf("max_depth %d: want at least 1", p.MaxDepth)
	case p.DefaultMaxSteps < 1 || p.MaxSteps < 1:
		return errors.New("default_max_steps and max_steps must be at least 1")
	case p.DefaultMaxSteps > p.MaxSteps:
		return fmt.Errorf("default_max_steps %d is over max_steps %d", p.DefaultMaxSteps, p.MaxSteps)
	case p.MaxChildren < 1 || p.MaxEnded < 1:
		return errors.New("max_children and max_ended must be at least 1")
	}
	return nil
}

func (p *Plugin) sender(sc wire.Scope) (*server.Session, error) {
	s, ok := p.host.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, &wire.Error{Code: wire.CodeRuntimeError, Message: "session ended", Detail: map[string]any{"reason": "session_ended"}}
	}
	return s, nil
}

// SubagentSpawn answers subagent/spawn/req.
func (p *Plugin) SubagentSpawn(ctx context.Context, sc wire.Scope, req *msg.SubagentSpawnReq) (*msg.SubagentSpawnResp, error) {
	parent, err := p.sender(sc)
	if err != nil {
		return nil, err
	}
	scope := string(req.MemoryScope)
	if scope == "" {
		scope = string(msg.SubagentSpawnReqMemoryScopeIsolated)
	}
	caps, err := p.capsFor(parent, req.Capabilities)
	if err != nil {
		return nil, err
	}
	depth := parent.Depth() + 1
	maxDepth := p.MaxDepth
	if req.MaxDepth != nil {
		maxDepth = min(maxDepth, depth+*req.MaxDepth)
	}
	steps := p.DefaultMaxSteps
	if req.MaxSteps != nil {
		if *req.MaxSteps > p.MaxSteps {
			return nil, &wire.FieldError{Field: "max_steps", Reason: fmt.Sprintf("%d is over this host's limit of %d", *req.MaxSteps, p.MaxSteps)}
		}
		steps = *req.MaxSteps
	}
	p.spawnMu.Lock()
	if n := len(parent.Children()); n >= p.MaxChildren {
		p.spawnMu.Unlock()
		return nil, &wire.Error{Code: wire.CodeRuntimeError,
			Message: fmt.Sprintf("children limit: this session already has %d live subagents", n),
			Detail:  map[string]any{"reason": "children_limit", "limit": p.MaxChildren}}
	}
	child, token, err := p.host.SpawnChild(ctx, parent, server.ChildOptions{Name: req.Name, Capabilities: caps,
		MemoryScope: scope, MaxDepth: maxDepth, MaxSteps: steps})
	p.spawnMu.Unlock()
	if err != nil {
		return nil, err
	}
	ci, _ := child.Child()
	r := &record{ID: child.Handle(), Name: req.Name, ParentID: parent.Handle(), Scope: scope, Caps: ci.Capabilities,
		Depth: ci.Depth, MaxDepth: ci.DepthLimit, MaxSteps: ci.MaxSteps, Created: ci.Created, sess: child}
	p.mu.Lock()
	p.tree[parent.Handle()] = append(p.tree[parent.Handle()], r)
	p.live[r.ID] = r
	p.pruneLocked(parent.Handle())
	p.mu.Unlock()
	// The child or its tree may have closed before the record existed, so
	// SessionClosed missed it; catch up now.
	if child.State() == "closed" {
		p.SessionClosed(child.Handle())
	}
	if parent.State() == "closed" && parent.Parent() == nil {
		p.SessionClosed(parent.Handle())
	}
	// The child's transport id goes to its creator once, here, with its
	// token: the two are what its agent connects with. Every other message
	// names the child by its public handle (server/handle.go).
	return &msg.SubagentSpawnResp{SubagentID: r.ID, SessionID: child.ID(), AuthToken: token,
		HandshakeTimeout: time.Duration(p.host.Config().Server.Limits.HandshakeTimeout).Seconds(),
		Subagent:         p.wireRecord(r)}, nil
}

// capsFor turns the requested capability names into canonical ones, or
// all of the parent's enabled ones when none were named.
func (p *Plugin) capsFor(parent *server.Session, names []string) ([]string, error) {
	if names == nil {
		var out []string
		for _, c := range p.host.Served() {
			if parent.Enabled(c) {
				out = append(out, c)
			}
		}
		return out, nil
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(names))
	for i, n := range names {
		c := server.CanonicalCapability(n)
		if !parent.Enabled(c) {
			// What the sender holds is state, not shape: denied, never
			// schema_violation (docs/DECISIONS.md, Errors of state).
			return nil, fmt.Errorf("capabilities[%d]: %q is not enabled for this session; a subagent gets a subset of its parent's capabilities: %w", i, n, wire.ErrDenied)
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// pruneLocked drops the oldest ended records under parent beyond MaxEnded,
// with their subtrees.
func (p *Plugin) pruneLocked(parent string) {
	recs := p.tree[parent]
	ended := 0
	for _, r := range recs {
		if r.sess == nil {
			ended++
		}
	}
	if ended <= p.MaxEnded {
		return
	}
	kept := recs[:0]
	for _, r := range recs {
		if r.sess == nil && ended > p.MaxEnded {
			ended--
			if !r.Restored {
				p.dropLocked(r.ID)
			}
			continue
		}
		kept = append(kept, r)
	}
	p.tree[parent] = kept
}

// dropLocked forgets the records under id, recursively.
func (p *Plugin) dropLocked(id string) {
	for _, r := range p.tree[id] {
		if !r.Restored {
			p.dropLocked(r.ID)
		}
		if p.live[r.ID] == r {
			delete(p.live, r.ID)
		}
	}
	delete(p.tree, id)
}

// subtreeLocked returns the records under id, parents before children.
func (p *Plugin) subtreeLocked(id string) []*record {
	var out []*record
	queue := []string{id}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, r := range p.tree[cur] {
			out = append(out, r)
			if !r.Restored {
				queue = append(queue, r.ID)
			}
		}
	}
	return out
}

// findLocked returns the record of id among the descendants of session.
func (p *Plugin) findLocked(session, id string) (*record, []*record) {
	sub := p.subtreeLocked(session)
	for _, r := range sub {
		if r.ID == id {
			return r, sub
		}
	}
	return nil, sub
}

// status reports a record's status: a live one from its kernel session.
func (r *record) status() (string, int) {
	if r.sess == nil {
		return r.Status, r.Steps
	}
	ci, _ := r.sess.Child()
	st := map[string]string{"waiting": StatusWaiting, "live": StatusRunning, "draining": StatusDraining}[r.sess.State()]
	if r.Status == StatusTerminated {
		st = StatusTerminated
	}
	if st == "" {
		st = StatusEnded
	}
	return st, ci.Steps
}

func (p *Plugin) wireRecord(r *record) msg.SubagentRecord {
	st, steps := r.status()
	out := msg.SubagentRecord{SubagentID: r.ID, Name: r.Name, ParentID: r.ParentID, Depth: r.Depth,
		MemoryScope: msg.SubagentRecordMemoryScope(r.Scope), Capabilities: append([]string{}, r.Caps...),
		MaxDepth: r.MaxDepth, MaxSteps: r.MaxSteps, Steps: steps, Status: msg.SubagentRecordStatus(st),
		CreatedAt: wire.Epoch(r.Created)}
	if r.Reason != "" {
		reason := r.Reason
		out.Reason = &reason
	}
	if !r.Ended.IsZero() {
		e := wire.Epoch(r.Ended)
		out.EndedAt = &e
	}
	return out
}

// SubagentList answers subagent/list/req.
func (p *Plugin) SubagentList(ctx context.Context, sc wire.Scope, req *msg.SubagentListReq) (*msg.SubagentListResp, error) {
	p.mu.Lock()
	sub := p.subtreeLocked(sc.SessionID())
	p.mu.Unlock()
	sort.SliceStable(sub, func(i, j int) bool { return sub[i].Created.Before(sub[j].Created) })
	out := make([]msg.SubagentRecord, 0, len(sub))
	for _, r := range sub {
		w := p.wireRecord(r)
		if req.RunningOnly && (w.Status == StatusEnded || w.Status == StatusTerminated) {
			continue
		}
		out = append(out, w)
	}
	return &msg.SubagentListResp{Subagents: out}, nil
}

// SubagentStatus answers subagent/status/req.
func (p *Plugin) SubagentStatus(ctx context.Context, sc wire.Scope, req *msg.SubagentStatusReq) (*msg.SubagentStatusResp, error) {
	p.mu.Lock()
	r, _ := p.findLocked(sc.SessionID(), req.SubagentID)
	var kids []string
	if r != nil && !r.Restored {
		for _, k := range p.tree[r.ID] {
			kids = append(kids, k.ID)
		}
	}
	p.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("subagent_id %q: %w", req.SubagentID, ErrUnknownSubagent)
	}
	if kids == nil {
		kids = []string{}
	}
	return &msg.SubagentStatusResp{Subagent: p.wireRecord(r), Children: kids}, nil
}

// SubagentTerminate answers subagent/terminate/req: the subagent and its
// descendants are marked terminated, then its session is closed, which
// closes theirs (the kernel's cascade).
func (p *Plugin) SubagentTerminate(ctx context.Context, sc wire.Scope, req *msg.SubagentTerminateReq) (*msg.SubagentTerminateResp, error) {
	reason := "terminated by " + sc.SessionID()
	if req.Reason != nil && *req.Reason != "" {
		reason = *req.Reason
	}
	now := time.Now()
	p.mu.Lock()
	r, _ := p.findLocked(sc.SessionID(), req.SubagentID)
	if r == nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("subagent_id %q: %w", req.SubagentID, ErrUnknownSubagent)
	}
	terminated := []string{}
	target := r.sess
	victims := append([]*record{r}, p.subtreeLocked(r.ID)...)
	if r.Restored {
		victims = victims[:1]
	}
	for _, v := range victims {
		if v.sess == nil || v.sess.State() == "closed" || v.Status == StatusTerminated {
			continue
		}
		v.Status, v.Reason, v.Ended = StatusTerminated, reason, now
		terminated = append(terminated, v.ID)
	}
	p.mu.Unlock()
	if target != nil {
		target.Close() // cascades to its descendants (server.Session.Close)
	}
	return &msg.SubagentTerminateResp{SubagentID: req.SubagentID, Terminated: terminated}, nil
}

// SessionClosed ends the record of a subagent whose session closed, and
// forgets the records of a tree whose top-level session closed.
func (p *Plugin) SessionClosed(sessionID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.live[sessionID]; r != nil {
		delete(p.live, sessionID)
		if ci, ok := r.sess.Child(); ok {
			r.Steps = ci.Steps
		}
		r.sess = nil
		if r.Status != StatusTerminated {
			reason := "its session closed"
			if ps, ok := p.host.SessionByHandle(r.ParentID); !ok || ps.State() == "closed" {
				reason = "its parent's session closed" // the kernel's cascade
			}
			r.Status, r.Reason, r.Ended = StatusEnded, reason, time.Now()
		}
		return
	}
	// Not a live subagent: a top-level session (or one this plugin never
	// recorded), whose records go with it.
	p.dropLocked(sessionID)
}

var (
	_ msg.SubagentHandler    = (*Plugin)(nil)
	_ server.Provisioner     = (*Plugin)(nil)
	_ server.Validator       = (*Plugin)(nil)
	_ server.SessionObserver = (*Plugin)(nil)
	_ persist.Snapshotter    = (*Plugin)(nil)
)
