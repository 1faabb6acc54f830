package memory

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"entgo.io/ent/dialect"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/wire"
)

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module aep.memory.builtin, the memory capability,
// named memory.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: "aep.memory.builtin", Capability: "memory", DefaultName: "memory.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// Tier names (spec §2.11).
const (
	TierWorking  = "working"
	TierEpisodic = "episodic"
	TierSemantic = "semantic"
)

// Full policies of the working tier.
const (
	PolicyReject   = "reject"
	PolicyEvictLRU = "evict_lru"
)

// Defaults of the plugin's settings.
const (
	DefaultMaxContentBytes = 64 << 10
	DefaultCollectInterval = time.Minute
)

// Errors of memory requests. Those a retry cannot fix wrap wire.ErrInvalid.
var (
	ErrUnknownMemory = fmt.Errorf("unknown memory_id; call memory/init first: %w", wire.ErrNotFound)
	ErrWorkingFull   = fmt.Errorf("working memory full: %w", wire.ErrInvalid)
	ErrNoStore       = errors.New("the episodic and semantic tiers need the host's store, and this host has none")
)

// Plugin serves the memory namespace. Its exported fields with yaml tags
// are its settings (the `config` of its plugin entry, decoded strictly).
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/memory.json, docs/config.md).
	Settings `yaml:",inline"`

	// Clock is the time source of TTLs and timestamps; nil is time.Now.
	// Tests set it to move time.
	Clock func() time.Time `yaml:"-"`

	log     *slog.Logger
	backend Backend
	host    *server.Host
	db      *sql.DB // the store's, to count the persistent tiers' bytes (budget.go)
	stop    chan struct{}
	done    chan struct{}

	// sessions holds each session's memory; the kernel drops it when the
	// session ends and before a restore (docs/DECISIONS.md, State: working
	// memory is session-scoped).
	sessions *server.SessionState[sessionMem]
}

// sessionMem is one session's memory: its memory_ids and its own working
// store (unused by shared and restricted children, which resolve to their
// parent's; see [Plugin.working]).
type sessionMem struct {
	mu      sync.Mutex
	handles map[string]handle
	working *workingStore
}

// handle is what a memory_id names.
type handle struct {
	Namespace string            `json:"namespace"`
	Agent     string            `json:"agent,omitempty"`
	Scope     map[string]string `json:"scope,omitempty"`
	// Tenant is the storage key of the tenant of the session that opened it
	// (server.StorageTenant): persistent namespaces are the tenant's, never
	// shared across tenants.
	Tenant string `json:"tenant,omitempty"`
}

// key is the handle's place in the persistent tiers: the namespace, and
// for any tenant but the default one the tenant too (tenantNamespace).
func (h handle) key() scopeKey { return scopeKey{tenantNamespace(h.Tenant, h.Namespace), h.Agent} }

// tenantNamespace is how a tenant's namespace is stored: the default
// tenant's as it is (the rows of hosts from before tenants are its), any
// other's behind a prefix no namespace can hold (namespaces refuse
// control characters).
func tenantNamespace(tenant, ns string) string {
	if tenant == "" {
		return ns
	}
	return "\x1ft:" + tenant + "\x1f" + ns
}

// Provision opens the persistent tiers on the host's store.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	p.log = env.Logger
	if p.MaxContentBytes <= 0 {
		p.MaxContentBytes = DefaultMaxContentBytes
	}
	if p.WorkingFullPolicy == "" {
		p.WorkingFullPolicy = PolicyReject
	}
	if p.CollectInterval <= 0 {
		p.CollectInterval = server.Duration(DefaultCollectInterval)
	}
	if p.Clock == nil {
		p.Clock = time.Now
	}
	p.host = env.Host
	p.sessions = server.NewSessionState(env, func(string) *sessionMem {
		return &sessionMem{handles: map[string]handle{}, working: newWorkingStore()}
	}, nil)
	switch {
	case env.Store == nil:
		p.backend = unsupported{ErrNoStore}
		p.log.Warn("memory: no store; episodic and semantic tiers unavailable")
	case env.Store.Dialect() == dialect.SQLite:
		b, err := newSQLiteBackend(ctx, env.Store.DB())
		if err != nil {
			return err
		}
		p.backend = b
	case env.Store.Dialect() == dialect.Postgres:
		b, err := newPostgresBackend(ctx, env.Store.DB())
		if err != nil {
			return err
		}
		p.backend = b
	default:
		return fmt.Errorf("memory: the episodic and semantic tiers have no backend for a %s store", env.Store.Dialect())
	}
	if env.Store != nil {
		p.db = env.Store.DB()
		p.countPersistent(ctx, p.db)
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.collector()
	return nil
}

// Validate checks the settings.
func (p *Plugin) Validate() error {
	if p.WorkingFullPolicy != PolicyReject && p.WorkingFullPolicy != PolicyEvictLRU {
		return fmt.Errorf("working_full_policy %q: want %q or %q", p.WorkingFullPolicy, PolicyReject, PolicyEvictLRU)
	}
	if p.WorkingMaxEntries < 0 || p.WorkingMaxBytes < 0 {
		return errors.New("working_max_entries and working_max_bytes must not be negative")
	}
	return nil
}

// Cleanup stops the collector.
func (p *Plugin) Cleanup() error {
	if p.stop != nil {
		close(p.stop)
		<-p.done
		p.stop = nil
	}
	return nil
}

// collector deletes expired entries every CollectInterval (spec §3: an
// expired entry may be garbage-collected). Reads never depend on it.
func (p *Plugin) collector() {
	defer close(p.done)
	t := time.NewTicker(time.Duration(p.CollectInterval))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(p.CollectInterval))
			if _, err := p.Collect(ctx); err != nil {
				p.log.Warn("memory: collecting expired entries", "error", err)
			}
			p.countPersistent(ctx, p.db)
			cancel()
		}
	}
}

// Collect deletes every expired entry now, in every session's working
// store and in the persistent tiers, and returns how many.
func (p *Plugin) Collect(ctx context.Context) (int, error) {
	now := p.now()
	var stores []*workingStore
	p.sessions.Each(func(_ string, sm *sessionMem) {
		sm.mu.Lock()
		stores = append(stores, sm.working)
		sm.mu.Unlock()
	})
	n := 0
	for _, ws := range stores {
		n += ws.purge(now)
	}
	m, err := p.backend.Collect(ctx, now)
	return n + m, err
}

// now is the plugin's clock in nanoseconds, cut to the microseconds of
// the wire's timestamps (wire.Epoch), so a created_at an agent reads back
// selects the entry exactly in a since/until filter.
func (p *Plugin) now() int64 { return p.Clock().Truncate(time.Microsecond).UnixNano() }

// lookup finds the memory a request names; ids of other sessions are
// unknown here (spec §5 rule 4).
func (p *Plugin) lookup(sessionID, memoryID string) (handle, error) {
	sm, err := p.sessions.GetOrCreate(sessionID)
	if err != nil {
		return handle{}, err
	}
	sm.mu.Lock()
	h, ok := sm.handles[memoryID]
	sm.mu.Unlock()
	if !ok {
		return handle{}, fmt.Errorf("memory_id %q: %w", memoryID, ErrUnknownMemory)
	}
	return h, nil
}

func newMemoryID() string { return "mem-" + wire.RandomHex(8) }

// MemoryInit answers memory/init/req.
func (p *Plugin) MemoryInit(ctx context.Context, s wire.Scope, req *msg.MemoryInitReq) (*msg.MemoryInitResp, error) {
	h := handle{Namespace: req.Namespace}
	if h.Namespace == "" {
		h.Namespace = "default"
	}
	for _, r := range h.Namespace {
		if r < 0x20 || r == 0x7f {
			return nil, &wire.FieldError{Field: "namespace", Reason: "must not hold control characters"}
		}
	}
	if p.host != nil {
		h.Tenant = p.host.TenantKey(s.SessionID())
	}
	if req.Scope != nil && len(*req.Scope) > 0 {
		h.Scope = *req.Scope
		h.Agent = h.Scope["agent"]
	}
	id := newMemoryID()
	sm, err := p.sessions.GetOrCreate(s.SessionID())
	if err != nil {
		return nil, err
	}
	sm.mu.Lock()
	sm.handles[id] = h
	sm.mu.Unlock()
	resp := &msg.MemoryInitResp{MemoryID: id, Namespace: h.Namespace, Success: true}
	if h.Agent != "" {
		resp.Agent = &h.Agent
	}
	return resp, nil
}

// MemoryStore answers memory/store/req. The whole batch is checked before
// anything is written, so a refused batch changes nothing; the working part
// is applied only after the persistent part committed.
func (p *Plugin) MemoryStore(ctx context.Context, s wire.Scope, req *msg.MemoryStoreReq) (*msg.MemoryStoreResp, error) {
	h, err := p.lookup(s.SessionID(), req.MemoryID)
	if err != nil {
		return nil, err
	}
	now := p.now()
	var working, persistent []record
	stored := make([]string, 0, len(req.Entries))
	for i := range req.Entries {
		e := &req.Entries[i]
		r, err := p.toRecord(e, now)
		if err != nil {
			return nil, wire.Nest(fmt.Sprintf("entries[%d]", i), err)
		}
		if r.Tier == TierWorking {
			working = append(working, r)
		} else {
			persistent = append(persistent, r)
		}
		stored = append(stored, r.Key)
	}
	var ws *workingStore
	if len(working) > 0 {
		var ro bool
		if ws, ro, err = p.working(s.SessionID()); err != nil {
			return nil, err
		}
		if ro {
			return nil, ErrReadOnly
		}
		if !p.evicts() {
			// Check the limits before the persistent part commits.
			if err := ws.fits(h.Namespace, working, p.limits(s.SessionID()), now); err != nil {
				return nil, err
			}
		}
	}
	if len(persistent) > 0 {
		if err := p.chargePersistent(s.SessionID(), persistent); err != nil {
			return nil, err
		}
		if err := p.backend.Put(ctx, h.key(), persistent); err != nil {
			return nil, err
		}
	}
	resp := &msg.MemoryStoreResp{Stored: stored}
	if ws != nil {
		ev, err := ws.put(h.Namespace, working, p.limits(s.SessionID()), now)
		if err != nil {
			return nil, err
		}
		if ev > 0 {
			resp.Evicted = &ev
		}
	}
	return resp, nil
}

func (p *Plugin) evicts() bool { return p.WorkingFullPolicy == PolicyEvictLRU }

// limits are sessionID's working memory bounds: the plugin's, and the
// session's budget (budget.go).
func (p *Plugin) limits(sessionID string) limits {
	return limits{maxEntries: p.WorkingMaxEntries, maxBytes: p.workingMaxBytes(sessionID), evict: p.evicts()}
}

// toRecord checks one entry and converts it.
func (p *Plugin) toRecord(e *msg.MemoryEntry, now int64) (record, error) {
	if e.Key == "" {
		return record{}, &wire.FieldError{Field: "key", Reason: "is required"}
	}
	switch string(e.Tier) {
	case TierWorking, TierEpisodic, TierSemantic:
	default:
		return record{}, &wire.FieldError{Field: "tier", Reason: fmt.Sprintf("unknown tier %q; want working, episodic or semantic", e.Tier)}
	}
	if len(e.Content) == 0 {
		return record{}, &wire.FieldError{Field: "content", Reason: "is required"}
	}
	if len(e.Content) > p.MaxContentBytes {
		return record{}, &wire.FieldError{Field: "content", Reason: fmt.Sprintf("is %d bytes, over the cap of %d bytes", len(e.Content), p.MaxContentBytes)}
	}
	if !json.Valid(e.Content) {
		return record{}, &wire.FieldError{Field: "content", Reason: "is not valid JSON"}
	}
	r := record{Tier: string(e.Tier), Key: e.Key, Content: append(json.RawMessage(nil), e.Content...),
		Tags: e.Tags, Created: now, Updated: now}
	if e.Source != nil {
		r.Source = *e.Source
	}
	if e.Metadata != nil && len(*e.Metadata) > 0 && string(*e.Metadata) != "null" {
		r.Metadata = append(json.RawMessage(nil), (*e.Metadata)...)
	}
	if e.TTL != nil && *e.TTL > 0 {
		r.Expires = now + int64(*e.TTL)*int64(time.Second)
	}
	return r, nil
}

// MemoryRetrieve answers memory/retrieve/req.
func (p *Plugin) MemoryRetrieve(ctx context.Context, s wire.Scope, req *msg.MemoryRetrieveReq) (*msg.MemoryRetrieveResp, error) {
	h, err := p.lookup(s.SessionID(), req.MemoryID)
	if err != nil {
		return nil, err
	}
	tiers, err := tiersOf((*string)(req.Tier))
	if err != nil {
		return nil, err
	}
	now := p.now()
	found := map[string]bool{}
	resp := &msg.MemoryRetrieveResp{Entries: []msg.MemoryEntry{}, Missing: []string{}}
	for _, tier := range tiers {
		var recs []record
		if tier == TierWorking {
			ws, _, err := p.working(s.SessionID())
			if err != nil {
				return nil, err
			}
			recs = ws.get(h.Namespace, req.Keys, now)
			for i := range recs {
				recs[i].Tier = TierWorking
			}
		} else if recs, err = p.backend.Get(ctx, tier, h.key(), req.Keys, now); err != nil {
			return nil, err
		}
		for i := range recs {
			found[recs[i].Key] = true
			resp.Entries = append(resp.Entries, toEntry(&recs[i]))
		}
	}
	for _, k := range req.Keys {
		if !found[k] {
			resp.Missing = append(resp.Missing, k)
			found[k] = true
		}
	}
	return resp, nil
}

// tiersOf expands an optional tier filter, in the order reads use.
func tiersOf(t *string) ([]string, error) {
	if t == nil || *t == "" {
		return []string{TierWorking, TierSemantic, TierEpisodic}, nil
	}
	switch *t {
	case TierWorking, TierEpisodic, TierSemantic:
		return []string{*t}, nil
	}
	return nil, &wire.FieldError{Field: "tier", Reason: fmt.Sprintf("unknown tier %q", *t)}
}

func secs(ns int64) *float64 {
	v := wire.Epoch(time.Unix(0, ns))
	return &v
}

func toEntry(r *record) msg.MemoryEntry {
	e := msg.MemoryEntry{Key: r.Key, Content: r.Content, Tier: msg.MemoryEntryTier(r.Tier), Tags: r.Tags,
		CreatedAt: secs(r.Created), UpdatedAt: secs(r.Updated)}
	if r.Source != "" {
		src := r.Source
		e.Source = &src
	}
	if len(r.Metadata) > 0 {
		m := r.Metadata
		e.Metadata = &m
	}
	if r.Expires != 0 {
		e.ExpiresAt = secs(r.Expires)
		ttl := int((r.Expires - r.Updated + int64(time.Second) - 1) / int64(time.Second))
		e.TTL = &ttl
	}
	if r.Tier == TierEpisodic {
		seq := int(r.Seq)
		e.Seq = &seq
	}
	return e
}

func nanos(sec *float64) int64 {
	if sec == nil {
		return 0
	}
	return wire.FromEpoch(*sec).UnixNano()
}

// MemoryRecall answers memory/recall/req: each tier returns its best
// `limit` hits, which are merged by score (or time) and cut to `limit`.
func (p *Plugin) MemoryRecall(ctx context.Context, s wire.Scope, req *msg.MemoryRecallReq) (*msg.MemoryRecallResp, error) {
	h, err := p.lookup(s.SessionID(), req.MemoryID)
	if err != nil {
		return nil, err
	}
	tiers, err := tiersOf((*string)(req.Tier))
	if err != nil {
		return nil, err
	}
	limit := req.Limit
	if limit <= 0 {
		limit = 10
	}
	newest := req.Order != msg.MemoryRecallReqOrderOldest
	var q *query
	if req.Query != nil {
		words := queryTerms(*req.Query)
		if len(words) == 0 && len(*req.Query) > 0 {
			// A query with no words (only punctuation) matches nothing.
			return &msg.MemoryRecallResp{Hits: []msg.MemoryHit{}}, nil
		}
		if len(words) > 0 {
			q = &query{words: words, m: newMatcher(words), minScore: req.MinScore, byTime: req.Order != msg.MemoryRecallReqOrderRelevance}
		}
	}
	f := filter{tags: req.Tags, since: nanos(req.Since), until: nanos(req.Until)}
	if f.since != 0 && f.until != 0 && f.until < f.since {
		return nil, &wire.FieldError{Field: "until", Reason: "is before since"}
	}
	now := p.now()
	var all []scored
	for _, tier := range tiers {
		if tier == TierWorking {
			ws, _, err := p.working(s.SessionID())
			if err != nil {
				return nil, err
			}
			for _, sc := range ws.search(h.Namespace, q, f, now) {
				sc.rec.Tier = TierWorking
				all = append(all, sc)
			}
			continue
		}
		// Each hit comes scored from its own text (text.go, matcher).
		got, err := p.backend.Search(ctx, tier, h.key(), q, f, newest, limit, now)
		if err != nil {
			return nil, err
		}
		all = append(all, got...)
	}
	if q == nil {
		for i := range all {
			all[i].raw = 1 // listing without a query scores 1
		}
	}
	if q == nil || q.byTime {
		sortByTime(all, newest)
	} else {
		sort.SliceStable(all, func(i, j int) bool { return all[i].raw > all[j].raw })
	}
	if len(all) > limit {
		all = all[:limit]
	}
	resp := &msg.MemoryRecallResp{Hits: make([]msg.MemoryHit, len(all))}
	for i := range all {
		resp.Hits[i] = msg.MemoryHit{Entry: toEntry(&all[i].rec), Score: all[i].raw}
	}
	return resp, nil
}

// MemoryForget answers memory/forget/req.
func (p *Plugin) MemoryForget(ctx context.Context, s wire.Scope, req *msg.MemoryForgetReq) (*msg.MemoryForgetResp, error) {
	h, err := p.lookup(s.SessionID(), req.MemoryID)
	if err != nil {
		return nil, err
	}
	if len(req.Keys) == 0 && len(req.Tags) == 0 && req.Tier == nil && req.OlderThan == nil {
		return nil, &wire.FieldError{Field: "keys", Reason: "one of keys, tags, tier or older_than is required"}
	}
	tiers, err := tiersOf((*string)(req.Tier))
	if err != nil {
		return nil, err
	}
	sel := selector{keys: req.Keys, tags: req.Tags}
	if req.OlderThan != nil {
		sel.updatedBefore = p.now() - int64(*req.OlderThan*1e9)
	}
	n := 0
	for _, tier := range tiers {
		if tier == TierWorking {
			ws, ro, err := p.working(s.SessionID())
			if err != nil {
				return nil, err
			}
			if ro {
				return nil, ErrReadOnly
			}
			n += ws.forget(h.Namespace, sel)
			continue
		}
		m, err := p.backend.Forget(ctx, tier, h.key(), sel)
		if err != nil {
			return nil, err
		}
		n += m
	}
	return &msg.MemoryForgetResp{Deleted: n}, nil
}

// MemoryStats answers memory/stats/req.
func (p *Plugin) MemoryStats(ctx context.Context, s wire.Scope, req *msg.MemoryStatsReq) (*msg.MemoryStatsResp, error) {
	h, err := p.lookup(s.SessionID(), req.MemoryID)
	if err != nil {
		return nil, err
	}
	now := p.now()
	resp := &msg.MemoryStatsResp{MemoryID: req.MemoryID, Namespace: h.Namespace}
	ws, _, err := p.working(s.SessionID())
	if err != nil {
		return nil, err
	}
	n, b := ws.stats(h.Namespace, now)
	wst := msg.MemoryTierStats{Tier: TierWorking, Entries: n, Bytes: b}
	if p.WorkingMaxEntries > 0 {
		wst.MaxEntries = &p.WorkingMaxEntries
	}
	if mb := p.workingMaxBytes(s.SessionID()); mb > 0 {
		wst.MaxBytes = &mb
	}
	resp.Tiers = append(resp.Tiers, wst)
	for _, tier := range []string{TierEpisodic, TierSemantic} {
		n, b, err := p.backend.Stats(ctx, tier, h.key(), now)
		if err != nil {
			return nil, err
		}
		resp.Tiers = append(resp.Tiers, msg.MemoryTierStats{Tier: msg.MemoryTierStatsTier(tier), Entries: n, Bytes: b})
	}
	return resp, nil
}

var (
	_ msg.MemoryHandler    = (*Plugin)(nil)
	_ server.Provisioner   = (*Plugin)(nil)
	_ server.Validator     = (*Plugin)(nil)
	_ server.CleanerUpper  = (*Plugin)(nil)
	_ persist.Snapshotter  = (*Plugin)(nil)
	_ server.ChildObserver = (*Plugin)(nil)
)
