package server

// Tenants (docs/DECISIONS.md, Tenants; server.tenants). Spec §5 has one
// authentication mechanism, a shared secret presented as auth_token at the
// handshake, and no roles. A host may hold several such secrets: each
// belongs to a named tenant, with the capabilities its sessions may have,
// their per-session budgets and totals over all of them on this host. The
// secret a handshake presents picks the tenant; nothing else of the
// protocol changes. server.auth_token alone is the implicit tenant
// "default" with every capability, so a host configured as before behaves
// as before. A session's subagents and forks are its tenant's.

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/wire"
)

// defaultTenant names the implicit tenant of server.auth_token.
const defaultTenant = "default"

// budgetLimits are a session's budgets: server.budgets (or its tenant's)
// and the bytes of its directory.
type budgetLimits struct {
	BudgetConfig
	DiskBytes int64
}

// tenant is one named set of secrets and what its sessions may use.
type tenant struct {
	name string

	mu     sync.RWMutex // guards what a reload changes
	hashes [][32]byte
	caps   map[string]bool // nil: every capability served
	lim    budgetLimits
	totals TenantTotals

	sessions   atomic.Int64 // counted sessions
	memUsed    atomic.Int64 // sandbox memory reserved, bytes
	persistent atomic.Int64 // persistent memory written, bytes
	removed    atomic.Bool

	diskMu sync.Mutex
	disk   int64 // the tenant's directories, as last summed
	diskAt time.Time

	codes sync.Map // outcome code → its aep_tenant_requests_total counter
}

// tenants is a host's tenants, by name and in configuration order.
type tenants struct {
	mu   sync.RWMutex
	list []*tenant
}

// errTenantSessions refuses a session past its tenant's total.
var errTenantSessions = wire.Reason("tenant_sessions", errors.New("the tenant is at its total of sessions on this host (server.tenants[].totals.sessions)"))

// allows reports whether the tenant's sessions may have capability c.
func (t *tenant) allows(c string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.caps == nil || t.caps[c]
}

func (t *tenant) limits() budgetLimits {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.lim
}

func (t *tenant) total() TenantTotals {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.totals
}

// matches reports, in constant time per secret, whether sum is one of the
// tenant's secrets' hashes.
func (t *tenant) matches(sum [32]byte) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ok := 0
	for _, h := range t.hashes {
		ok |= subtle.ConstantTimeCompare(h[:], sum[:])
	}
	return ok == 1
}

// configureTenants builds or updates the host's tenants from cfg: a
// tenant that stays keeps its counters; one gone is marked removed and
// returned, for its sessions to be ended.
func (h *Host) configureTenants(cfg Config) ([]*tenant, error) {
	type want struct {
		tc  TenantConfig
		sum [][32]byte
	}
	var wants []want
	if tok := cfg.Server.AuthToken; tok != "" {
		wants = append(wants, want{tc: TenantConfig{Name: defaultTenant}, sum: [][32]byte{sha256.Sum256([]byte(tok))}})
	}
	for _, tc := range cfg.Server.Tenants {
		if tc.Name == defaultTenant && cfg.Server.AuthToken != "" {
			return nil, fmt.Errorf("server.tenants: %q is server.auth_token's tenant; name this one otherwise", defaultTenant)
		}
		w := want{tc: tc}
		for _, hx := range tc.SecretSHA256 {
			b, err := hex.DecodeString(hx)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("server.tenants %q: secret_sha256 %q is not 64 hex digits", tc.Name, wire.Clip(hx))
			}
			w.sum = append(w.sum, [32]byte(b))
		}
		wants = append(wants, w)
	}
	h.tenants.mu.Lock()
	defer h.tenants.mu.Unlock()
	old := map[string]*tenant{}
	for _, t := range h.tenants.list {
		old[t.name] = t
	}
	seen := map[string]bool{}
	list := make([]*tenant, 0, len(wants))
	for _, w := range wants {
		if seen[w.tc.Name] {
			return nil, fmt.Errorf("server.tenants: %q is named twice", w.tc.Name)
		}
		seen[w.tc.Name] = true
		t := old[w.tc.Name]
		if t == nil {
			t = &tenant{name: w.tc.Name}
		}
		var caps map[string]bool
		if len(w.tc.Capabilities) > 0 {
			caps = map[string]bool{}
			for _, c := range w.tc.Capabilities {
				caps[CanonicalCapability(c)] = true
			}
		}
		t.mu.Lock()
		t.hashes, t.caps, t.lim, t.totals = w.sum, caps, tenantLimits(cfg, w.tc.Budgets), w.tc.Totals
		t.mu.Unlock()
		t.removed.Store(false)
		list = append(list, t)
	}
	var gone []*tenant
	for name, t := range old {
		if !seen[name] {
			t.removed.Store(true)
			gone = append(gone, t)
		}
	}
	h.tenants.list = list
	return gone, nil
}

// tenantLimits are the per-session budgets of a tenant: the server's,
// with the tenant's overrides.
func tenantLimits(cfg Config, b TenantBudgets) budgetLimits {
	lim := budgetLimits{BudgetConfig: cfg.Server.Budgets, DiskBytes: cfg.Server.Isolation.SessionQuotaBytes}
	if lim.DiskBytes <= 0 {
		lim.DiskBytes = defaultSessionQuota
	}
	set64 := func(v *int64, o int64) {
		if o > 0 {
			*v = o
		}
	}
	setInt := func(v *int, o int) {
		if o > 0 {
			*v = o
		}
	}
	set64(&lim.DiskBytes, b.DiskBytes)
	setInt(&lim.Files, b.Files)
	setInt(&lim.LeafWork, b.LeafWork)
	set64(&lim.SandboxMemoryBytes, b.SandboxMemoryBytes)
	set64(&lim.ProcessMemoryBytes, b.ProcessMemoryBytes)
	set64(&lim.WorkingMemoryBytes, b.WorkingMemoryBytes)
	set64(&lim.PersistentMemoryBytes, b.PersistentMemoryBytes)
	return lim
}

// tenantFor returns the tenant whose secret token is, or nil. Every
// tenant's hashes are compared, in constant time each.
func (h *Host) tenantFor(token string) *tenant {
	sum := sha256.Sum256([]byte(token))
	h.tenants.mu.RLock()
	defer h.tenants.mu.RUnlock()
	var found *tenant
	for _, t := range h.tenants.list {
		if t.matches(sum) && found == nil {
			found = t
		}
	}
	return found
}

// ReloadTenants applies the tenants (and server.auth_token's tenant) of
// cfg without a restart (SIGHUP, the admin API): a removed secret stops
// new handshakes at once; the sessions it opened go on (a rotation must
// not cut live agents); a removed tenant's sessions are ended.
func (h *Host) ReloadTenants(cfg Config) error {
	cfg = cfg.withDefaults()
	gone, err := h.configureTenants(cfg)
	if err != nil {
		return err
	}
	ended := 0
	for _, t := range gone {
		for _, s := range h.sessionList() {
			if s.tenant == t {
				s.Close()
				ended++
			}
		}
	}
	h.log.Info("tenants reloaded", "tenants", h.TenantNames(), "removed", len(gone), "sessions_ended", ended)
	return nil
}

// TenantNames lists the host's tenants in configuration order.
func (h *Host) TenantNames() []string {
	h.tenants.mu.RLock()
	defer h.tenants.mu.RUnlock()
	out := make([]string, len(h.tenants.list))
	for i, t := range h.tenants.list {
		out[i] = t.name
	}
	return out
}

// Tenant is the name of the session's tenant ("" before its handshake).
func (s *Session) Tenant() string {
	if s.tenant == nil {
		return ""
	}
	return s.tenant.name
}

// countTenant counts s in its tenant's total of sessions.
func countTenant(s *Session) error {
	t := s.tenant
	if t == nil || s.tenantCounted {
		return nil
	}
	if max := t.total().Sessions; max > 0 {
		for {
			n := t.sessions.Load()
			if n >= int64(max) {
				return errTenantSessions
			}
			if t.sessions.CompareAndSwap(n, n+1) {
				break
			}
		}
	} else {
		t.sessions.Add(1)
	}
	s.tenantCounted = true
	return nil
}

func releaseTenant(s *Session) {
	if s.tenantCounted {
		s.tenantCounted = false
		s.tenant.sessions.Add(-1)
	}
}

// reserveMemory counts bytes of sandbox memory in the tenant's total.
func (t *tenant) reserveMemory(bytes int64) error {
	max := t.total().SandboxMemoryBytes
	if max <= 0 {
		t.memUsed.Add(bytes)
		return nil
	}
	for {
		n := t.memUsed.Load()
		if n+bytes > max {
			return errTenantMemory(max, "the tenant's running processes hold %d bytes of its sandbox memory total of %d; this one's %d does not fit (server.tenants[].totals.sandbox_memory_bytes)", n, max, bytes)
		}
		if t.memUsed.CompareAndSwap(n, n+bytes) {
			return nil
		}
	}
}

// chargePersistent counts n bytes of persistent memory in the tenant's
// total.
func (t *tenant) chargePersistent(n int64) error {
	max := t.total().PersistentMemoryBytes
	if n > 0 && max > 0 && t.persistent.Load()+n > max {
		return errTenantPersistent(max, "the tenant's sessions wrote %d bytes of persistent memory; %d more pass its total of %d (server.tenants[].totals.persistent_memory_bytes)", t.persistent.Load(), n, max)
	}
	t.persistent.Add(n)
	return nil
}

// checkDisk refuses work that writes while the tenant's directories hold
// more than its total, summed at most once a second.
func (h *Host) checkTenantDisk(t *tenant) error {
	if t == nil {
		return nil
	}
	max := t.total().DiskBytes
	if max <= 0 {
		return nil
	}
	t.diskMu.Lock()
	defer t.diskMu.Unlock()
	if time.Since(t.diskAt) > time.Second {
		dirs := map[string]bool{}
		for _, s := range h.sessionList() {
			if s.tenant == t {
				dirs[h.sessionDirOf(s).Path] = true
			}
		}
		var sum int64
		for d := range dirs {
			b, _ := usage(d, 1<<30)
			sum += b
		}
		t.disk, t.diskAt = sum, time.Now()
	}
	if t.disk > max {
		return errTenantDisk(max, "the tenant's session directories hold %d bytes, over its total of %d (server.tenants[].totals.disk_bytes); delete files to go on", t.disk, max)
	}
	return nil
}

func errTenantMemory(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "tenant_sandbox_memory", "limit": limit}}
}

func errTenantPersistent(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "tenant_persistent_memory", "limit": limit}}
}

func errTenantDisk(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "tenant_disk", "limit": limit}}
}

// defaultLimits are the budgets of a session before its handshake names
// its tenant: the server's.
func (h *Host) defaultLimits() budgetLimits {
	lim := budgetLimits{BudgetConfig: h.cfg.Server.Budgets, DiskBytes: h.SessionQuota()}
	return lim
}

// authenticate checks a handshake's token and, for a top-level session,
// sets its tenant and budgets: a child accepts only its own token; a fork
// any secret of its source's tenant; any other session the secret of some
// tenant, which becomes its own.
func (s *Session) authenticate(token string) bool {
	h := s.h
	if s.token != nil {
		return tokenOK(*s.token, token)
	}
	t := h.tenantFor(token)
	if t == nil || t.removed.Load() {
		return false
	}
	if s.forked {
		return t == s.tenant
	}
	s.tenant = t
	if lim := t.limits(); lim != s.budget.lim {
		// Nothing ran in the session yet: its budget is its tenant's.
		s.budget = newBudget(lim)
	}
	return true
}

// TenantKey is the tenant under which the session's host-wide records
// (persistent memory, learning records, snapshots) are kept:
// StorageTenant of its tenant's name. A handle the host does not know
// gets the default tenant's key, which is only right for the callers
// that have no session at all (host-side jobs); request handlers always
// pass a live session's handle.
func (h *Host) TenantKey(sessionHandle string) string {
	if s, ok := h.SessionByHandle(sessionHandle); ok {
		return StorageTenant(s.Tenant())
	}
	return ""
}

// StorageTenant is how a tenant is named in stored records: "" for the
// default tenant, so that the records of a host from before tenants are
// its, and the tenant's name for any other.
func StorageTenant(name string) string {
	if name == defaultTenant {
		return ""
	}
	return name
}
