package wire

import (
	"sync"
	"sync/atomic"
)

// The envelope's type and proto take a few dozen values, the types of the
// registries and the protocol's version, on every message read: the scan
// returns the known string for them instead of a new one (an allocation
// per message, on every transport).

// internedValues is replaced, never changed, so a scan reads it without a
// lock; registries add to it when built, seldom after.
var (
	internedValues atomic.Pointer[map[string]string]
	internMu       sync.Mutex
)

func init() { internStrings(ProtoVersion) }

// interned returns b as a string, the known one when it is a registered
// type or the protocol version.
func interned(b []byte) string {
	if m := internedValues.Load(); m != nil {
		if v, ok := (*m)[string(b)]; ok { // no allocation to look up
			return v
		}
	}
	return string(b)
}

func intern(entries []*Entry) {
	types := make([]string, 0, len(entries))
	for _, e := range entries {
		types = append(types, e.Type)
	}
	internStrings(types...)
}

func internStrings(vals ...string) {
	internMu.Lock()
	defer internMu.Unlock()
	old := internedValues.Load()
	if old != nil && allKnown(*old, vals) {
		return // a registry built again from known entries (Union)
	}
	m := make(map[string]string, len(vals))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	for _, v := range vals {
		m[v] = v
	}
	internedValues.Store(&m)
}

func allKnown(m map[string]string, vals []string) bool {
	for _, v := range vals {
		if _, ok := m[v]; !ok {
			return false
		}
	}
	return true
}
