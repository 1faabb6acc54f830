package memory

import (
	"context"
	"database/sql"

	"github.com/aephost/aep/server"
)

// The memory tiers in the session's budget (server/budget.go): working
// memory is bounded by default (the smaller of working_max_bytes and the
// budget's working_memory_bytes); what a session tree writes to the
// persistent tiers counts against its persistent_memory_bytes, and all
// sessions' writes against the host's host_persistent_memory_bytes.

// workingMaxBytes is the bytes sessionID's working memory may hold: the
// smaller of working_max_bytes and the session's budget (its tenant's, or
// server.budgets.working_memory_bytes); 0 without a host and a setting.
func (p *Plugin) workingMaxBytes(sessionID string) int {
	if p.host == nil {
		return p.WorkingMaxBytes
	}
	b := int(p.host.WorkingMemoryBudgetOf(sessionID))
	if p.WorkingMaxBytes > 0 && p.WorkingMaxBytes < b {
		return p.WorkingMaxBytes
	}
	return b
}

// chargePersistent counts recs against the session's persistent memory
// budget and the host's total, before they are written.
func (p *Plugin) chargePersistent(sessionID string, recs []record) error {
	if p.host == nil {
		return nil
	}
	n := 0
	for i := range recs {
		n += recs[i].size()
	}
	return p.host.ChargePersistent(sessionID, int64(n))
}

// countPersistent tells the host how many bytes the persistent tiers hold
// now: at start, and after each collection of expired entries.
func (p *Plugin) countPersistent(ctx context.Context, db *sql.DB) {
	if p.host == nil || db == nil {
		return
	}
	var total int64
	for _, t := range []string{"memory_semantic", "memory_episodic"} {
		var n sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT SUM(size) FROM `+t).Scan(&n); err != nil {
			p.log.Warn("memory: counting the persistent tiers' bytes", "table", t, "err", err)
			return
		}
		total += n.Int64
	}
	p.host.SetPersistentTotal(total)
}

// WorkingMemoryUsed is the bytes of sessionID's working memory, for
// session/info's budgets (server.BudgetReporter).
func (p *Plugin) WorkingMemoryUsed(sessionID string) int64 {
	sm, ok := p.sessions.Get(sessionID)
	if !ok {
		return 0
	}
	sm.mu.Lock()
	ws := sm.working
	sm.mu.Unlock()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return int64(ws.bytes)
}

var _ server.BudgetReporter = (*Plugin)(nil)
