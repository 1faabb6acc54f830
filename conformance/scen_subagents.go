package conformance

import (
	"context"
	"sort"
)

// subagents: spawn, list, status, terminate (schemas/subagents.json), and,
// where the transport reaches a session by id, the child's handshake and
// gating (capability.subagent).
func (k *kit) subagents(ctx context.Context) error {
	all := []string{CheckSubagents, CheckSubagentsErrors, CheckSubagentGating}
	if !k.offers("subagents", all...) {
		return nil
	}
	s := k.sessionFor(ctx, CheckSubagents, "parent", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	c := CheckSubagents
	handle := ""
	if m := s.call(ctx, "session/info/req", nil); m.is("session/info/resp") {
		handle = str(m.body, "handle")
	}
	// The capability granted: one the parent holds, memory when it can.
	grant := ""
	for _, cap := range k.offeredCaps() {
		if cap == "subagents" || containsString(k.alwaysOn(), cap) {
			continue
		}
		if grant == "" || cap == "memory" {
			grant = cap
		}
	}
	granted := []any{}
	if grant != "" {
		granted = append(granted, grant)
	}
	name := k.name("child")
	m := s.call(ctx, "subagent/spawn/req", map[string]any{"name": name, "capabilities": granted, "memory_scope": "isolated", "max_steps": 50})
	if !k.want(c, m, "subagent/spawn/resp", "subagent/spawn") {
		return nil
	}
	id, childSession, token := str(m.body, "subagent_id"), str(m.body, "session_id"), str(m.body, "auth_token")
	k.expect(c, id != "" && childSession != "" && token != "", "subagent/spawn lacks subagent_id, session_id or auth_token: %s", m)
	k.expect(c, childSession != s.id, "the subagent's session_id is its parent's")
	rec := obj(m.body, "subagent")
	k.expect(c, str(rec, "subagent_id") == id && str(rec, "name") == name, "the spawn's record is not the subagent's: %s", show(rec))
	if handle != "" {
		k.expect(c, str(rec, "parent_id") == handle, "the record's parent_id is %q, the parent's handle %q", str(rec, "parent_id"), handle)
	}
	depth, _ := num(rec, "depth")
	steps, _ := num(rec, "max_steps")
	k.expect(c, depth == 1 && steps == 50 && str(rec, "memory_scope") == "isolated", "the record of a top-level session's subagent spawned with max_steps 50, isolated: %s", show(rec))
	k.expect(c, str(rec, "status") == "waiting", "a subagent just spawned is %q, want waiting", str(rec, "status"))
	caps := strs(rec, "capabilities")
	k.expect(c, sort.StringsAreSorted(caps), "the record's capabilities are not sorted: %v", caps)
	for _, cp := range caps {
		k.expect(c, cp == grant || containsString(k.alwaysOn(), cp), "the record grants %s, which was not asked for (%v)", cp, granted)
	}
	if grant != "" {
		k.expect(c, containsString(caps, grant), "the record's capabilities %v lack the granted %s", caps, grant)
	}
	m = s.call(ctx, "subagent/list/req", nil)
	if k.want(c, m, "subagent/list/resp", "subagent/list") {
		found := false
		for _, x := range arr(m.body, "subagents") {
			found = found || str(x, "subagent_id") == id
		}
		k.expect(c, found, "subagent/list lacks the subagent just spawned")
	}
	m = s.call(ctx, "subagent/status/req", map[string]any{"subagent_id": id})
	if k.want(c, m, "subagent/status/resp", "subagent/status") {
		k.expect(c, str(m.body, "subagent.subagent_id") == id, "subagent/status names %q", str(m.body, "subagent.subagent_id"))
	}

	k.childGating(ctx, childSession, token, grant, handle)

	m = s.call(ctx, "subagent/terminate/req", map[string]any{"subagent_id": id})
	if k.want(c, m, "subagent/terminate/resp", "subagent/terminate") {
		k.expect(c, str(m.body, "subagent_id") == id && containsString(strs(m.body, "terminated"), id), "subagent/terminate: %s, want terminated to hold %s", m, id)
	}
	m = s.call(ctx, "subagent/status/req", map[string]any{"subagent_id": id})
	if k.want(c, m, "subagent/status/resp", "subagent/status after terminate") {
		k.expect(c, str(m.body, "subagent.status") == "terminated", "a terminated subagent is %q", str(m.body, "subagent.status"))
	}

	e := CheckSubagentsErrors
	k.wantError(e, s.call(ctx, "subagent/status/req", map[string]any{"subagent_id": k.name("no-such-subagent")}), "subagent/status of an unknown id")
	k.wantRefusal(e, s.call(ctx, "subagent/terminate/req", map[string]any{"subagent_id": k.name("no-such-subagent")}), "subagent/terminate/resp", "subagent/terminate of an unknown id")
	if grant != "" {
		only := k.sessionFor(ctx, e, "subagents only", []string{"subagents"})
		if only != nil {
			k.wantError(e, only.call(ctx, "subagent/spawn/req", map[string]any{"name": k.name("over"), "capabilities": []any{grant}}), "granting "+grant+", which the sender does not hold", "schema_violation")
			only.close(ctx)
		}
	}
	return nil
}

// childGating: the child opens with its own token only, and serves what it
// was granted and the always-on namespaces, as its accepted_caps say.
func (k *kit) childGating(ctx context.Context, sessionID, token, grant, parentHandle string) {
	c := CheckSubagentGating
	if k.target.Attach == nil {
		k.skip("needs "+needAttach, c)
		k.transportBranch("no attach")
		return
	}
	conn, err := k.target.Attach(ctx, sessionID)
	if err != nil {
		k.fail(c, "reaching the child session by its id: %v", err)
		return
	}
	child := k.newSession(conn, "child")
	defer child.close(ctx)
	asked := append(append([]string(nil), k.offeredCaps()...), "no_such_capability")
	m, err := child.handshake(ctx, asked, k.opts.Token)
	if err != nil {
		k.fail(c, "the child's handshake with the host's token: %v", err)
		return
	}
	k.expect(c, m.Type == "handshake/resp" && m.OK != nil && !*m.OK, "the child accepted the host's token: %s", clip(m.raw))
	if m.OK != nil && *m.OK {
		return
	}
	m, err = child.handshake(ctx, asked, token)
	if err != nil || m.OK == nil || !*m.OK {
		k.fail(c, "the child's handshake with its own token: %v %s", err, m)
		return
	}
	probes := k.probes()
	for i, e := range m.Caps {
		if i >= len(asked) || e.Name != asked[i] {
			k.fail(c, "the child's accepted_caps[%d] is %q, asked %q", i, e.Name, asked[i])
			continue
		}
		always := containsString(k.alwaysOn(), e.Name)
		want := e.Name == grant || always
		k.expect(c, e.Enabled == want, "the child's accepted_caps reports %s enabled %v; it was granted %q (and the always-on %v)", e.Name, e.Enabled, grant, k.alwaysOn())
		p, ok := probes[e.Name]
		if !ok {
			continue
		}
		r := child.callAs(ctx, compareLoose, p.typ, p.body)
		served := r.err == nil && !r.isError("capability_missing")
		k.expect(c, served == want, "the child's %s: %s (enabled %v in its accepted_caps)", p.typ, r, e.Enabled)
	}
	if r := child.call(ctx, "session/info/req", nil); r.is("session/info/resp") && parentHandle != "" {
		k.expect(c, str(r.body, "parent_handle") == parentHandle, "the child's session/info names parent_handle %q, the parent's handle is %q", str(r.body, "parent_handle"), parentHandle)
	}
}
