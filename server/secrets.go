package server

import "sync"

// Declared secrets (docs/DECISIONS.md, Declared secrets; docs/SECURITY.md,
// Secrets and session ids). A plugin that is given a secret — a toolkit
// password from toolkit/configure, an MCP token from its config or from
// mcp/server/register — declares it here, for one session or for the host.
// Before a snapshot is written the kernel searches it for every secret
// declared for the session's tree (the session, its ancestors and its
// descendants, which may share working memory) and for the host, beside
// the host token, the child tokens and [SecretHolder]s; a hit refuses the
// snapshot with an error that names the kind and the declaring plugin,
// never the value. Session secrets are forgotten when the session ends.

// secretStore holds the declared secrets: session handle ("" for the
// host) → plugin name → values.
type secretStore struct {
	mu sync.Mutex
	m  map[string]map[string][]string
}

// DeclareSecrets records values as secrets the plugin was given, for the
// session with that handle (wire.Scope.SessionID), or for the host when
// sessionID is "". Empty values are ignored. Declaring a value twice is
// harmless.
func (e PluginEnv) DeclareSecrets(sessionID string, values ...string) {
	if e.Host == nil {
		return
	}
	st := &e.Host.declared
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[string]map[string][]string{}
	}
	byPlugin := st.m[sessionID]
	if byPlugin == nil {
		byPlugin = map[string][]string{}
		st.m[sessionID] = byPlugin
	}
outer:
	for _, v := range values {
		if v == "" {
			continue
		}
		for _, have := range byPlugin[e.Name] {
			if have == v {
				continue outer
			}
		}
		byPlugin[e.Name] = append(byPlugin[e.Name], v)
	}
}

// forgetSecrets drops the secrets declared for a session that ended.
func (h *Host) forgetSecrets(handle string) {
	h.declared.mu.Lock()
	delete(h.declared.m, handle)
	h.declared.mu.Unlock()
}

// namedSecret is a secret with the words that describe it in errors and
// logs, which never include the value.
type namedSecret struct {
	what, value string
}

// sessionTree returns the handles of s, its ancestors and its descendants.
func sessionTree(s *Session) []string {
	var out []string
	for p := s.parent; p != nil; p = p.parent {
		out = append(out, p.handle)
	}
	queue := []*Session{s}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		out = append(out, cur.handle)
		queue = append(queue, cur.Children()...)
	}
	return out
}

// declaredSecrets returns the secrets declared for the host and for the
// sessions of s's tree.
func (h *Host) declaredSecrets(s *Session) []namedSecret {
	keys := append([]string{""}, sessionTree(s)...)
	h.declared.mu.Lock()
	defer h.declared.mu.Unlock()
	var out []namedSecret
	for _, k := range keys {
		for plugin, vals := range h.declared.m[k] {
			for _, v := range vals {
				out = append(out, namedSecret{what: "a secret plugin " + `"` + plugin + `"` + " declared", value: v})
			}
		}
	}
	return out
}
