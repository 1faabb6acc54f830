package server

import (
	"errors"
	"fmt"
	"sync"
)

// Claimer is implemented by plugins that own names fixed at start-up (for
// example the tools they serve). Claims are checked for uniqueness across
// plugins when the host starts: a name has one owner, and requests of an
// owned type (wire.Entry.Owner) go to that owner alone.
type Claimer interface {
	Claims() []Claim
}

// Claim is ownership of one name of one kind, such as ("tool", "read_file").
type Claim struct {
	Kind string
	Name string
}

// ErrClaimed is the cause when a name is already owned by another plugin.
var ErrClaimed = errors.New("already claimed")

// Claims registers which plugin owns which name. A claim is host-wide
// (session "") or held for one session: names a session adds at run time,
// such as the tools of an MCP server it registered, belong to that session
// only, so two sessions may register the same name without blocking each
// other. A host-wide claim shadows every session's.
type Claims struct {
	mu     sync.RWMutex
	owners map[scopedClaim]string
}

type scopedClaim struct {
	session string
	Claim
}

// NewClaims returns an empty register.
func NewClaims() *Claims { return &Claims{owners: map[scopedClaim]string{}} }

// Claim records that owner owns c, host-wide when session is "" and for
// that session otherwise. A name another owner holds in the same scope, or
// host-wide, is refused.
func (r *Claims) Claim(session string, c Claim, owner string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.owners[scopedClaim{"", c}]; ok && prev != owner {
		return fmt.Errorf("%s %q of plugin %q: %w by plugin %q", c.Kind, c.Name, owner, ErrClaimed, prev)
	}
	if session != "" {
		if prev, ok := r.owners[scopedClaim{session, c}]; ok && prev != owner {
			return fmt.Errorf("%s %q of plugin %q: %w by plugin %q", c.Kind, c.Name, owner, ErrClaimed, prev)
		}
	}
	r.owners[scopedClaim{session, c}] = owner
	return nil
}

// Release gives up a claim owner holds in the scope of session ("" for host-wide).
func (r *Claims) Release(session string, c Claim, owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := scopedClaim{session, c}
	if r.owners[k] == owner {
		delete(r.owners, k)
	}
}

// Owner returns the owner of c as seen from session: the host-wide owner,
// else the session's own.
func (r *Claims) Owner(session string, c Claim) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if o, ok := r.owners[scopedClaim{"", c}]; ok {
		return o, true
	}
	if session == "" {
		return "", false
	}
	o, ok := r.owners[scopedClaim{session, c}]
	return o, ok
}
