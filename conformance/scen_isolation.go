package conformance

import "context"

// isolation: sessions are independent (spec §5 rule 4). A holds state of
// every capability offered; B, a session of the same agent with the same
// token, tries every id of A's it could learn — by guessing, from a log,
// from a record that names A — and must neither see nor change A's state.
func (k *kit) isolation(ctx context.Context) error {
	a := k.sessionFor(ctx, CheckIsolationIDs, "A", k.opts.Caps)
	if a == nil {
		return nil
	}
	defer a.close(ctx)
	b := k.sessionFor(ctx, CheckIsolationIDs, "B", k.opts.Caps)
	if b == nil {
		return nil
	}
	defer b.close(ctx)
	c := k.sessionFor(ctx, CheckIsolationIDs, "C", k.opts.Caps)
	if c == nil {
		return nil
	}
	c.close(ctx)

	ids := map[string]string{}
	for _, s := range []*session{a, b, c} {
		if k.expect(CheckIsolationIDs, s.id != "", "session %s: the handshake gave no session_id", s.label) {
			if other, dup := ids[s.id]; dup {
				k.fail(CheckIsolationIDs, "sessions %s and %s were both given the session_id %q", other, s.label, s.id)
			}
			ids[s.id] = s.label
		}
	}
	handles := map[string]string{}
	handleOf := map[*session]string{}
	for _, s := range []*session{a, b} {
		m := s.call(ctx, "session/info/req", nil)
		if !k.want(CheckIsolationIDs, m, "session/info/resp", "session/info of "+s.label) {
			continue
		}
		k.expect(CheckIsolationIDs, str(m.body, "session_id") == s.id, "session/info of %s names the session_id %q, its handshake %q", s.label, str(m.body, "session_id"), s.id)
		h := str(m.body, "handle")
		handleOf[s] = h
		if h != "" {
			if other, dup := handles[h]; dup {
				k.fail(CheckIsolationIDs, "sessions %s and %s have the same handle %q", other, s.label, h)
			}
			handles[h] = s.label
		}
	}

	st := CheckIsolationState
	// A session_id in a body must be the sender's (docs/DECISIONS.md,
	// Wire): B naming A's cannot act as A.
	if k.offered["chains"] && a.id != "" {
		m := b.call(ctx, "chain/define/req", map[string]any{"name": k.name("as-a"), "session_id": a.id,
			"chain": map[string]any{"nodes": []any{map[string]any{"id": "n", "kind": "gather"}}}})
		k.wantError(st, m, "B defines a chain naming A's session_id in the body")
	}
	// A's public handle opens nothing: B cannot restore from it.
	if h := handleOf[a]; h != "" {
		m := b.call(ctx, "session/restore/req", map[string]any{"from_session": h})
		k.wantRefusal(st, m, "session/restore/resp", "B restores from_session A's public handle")
	}

	if k.offered["memory"] {
		k.isolateMemory(ctx, a, b)
	}
	if k.offered["env"] {
		k.isolateEnv(ctx, a, b)
	}
	if k.offered["proc"] {
		k.isolateProc(ctx, a, b)
	}
	if k.offered["chains"] {
		name := k.name("a-chain")
		m := a.call(ctx, "chain/define/req", map[string]any{"name": name, "chain": map[string]any{"nodes": []any{map[string]any{"id": "n", "kind": "gather"}}}})
		if k.want(st, m, "chain/define/resp", "A defines a chain") {
			m = b.call(ctx, "chain/run/req", map[string]any{"name": name})
			k.wantRefusal(st, m, "chain/run/resp", "B runs A's chain by its name")
		}
	}
	k.isolateSnapshots(ctx, a, b)
	if k.offered["subagents"] {
		k.isolateSubagents(ctx, a, b, handleOf[a])
	}
	if k.offered["toolkits"] {
		k.isolateToolkits(ctx, a, b)
	}
	return nil
}

func (k *kit) isolateMemory(ctx context.Context, a, b *session) {
	st := CheckIsolationState
	m := a.call(ctx, "memory/init/req", map[string]any{"namespace": k.name("isolation")})
	if !k.want(st, m, "memory/init/resp", "A's memory/init") {
		return
	}
	mid := str(m.body, "memory_id")
	key := k.name("a-working")
	m = a.call(ctx, "memory/store/req", map[string]any{"memory_id": mid, "entries": []any{map[string]any{"key": key, "content": "A's", "tier": "working"}}})
	if !k.want(st, m, "memory/store/resp", "A stores a working entry") {
		return
	}
	k.wantError(st, b.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{key}}), "B retrieves with A's memory_id")
	k.wantError(st, b.call(ctx, "memory/store/req", map[string]any{"memory_id": mid, "entries": []any{map[string]any{"key": key, "content": "B's", "tier": "working"}}}), "B stores with A's memory_id")
	k.wantError(st, b.call(ctx, "memory/forget/req", map[string]any{"memory_id": mid, "keys": []any{key}}), "B forgets with A's memory_id")
	// B's own memory of the same namespace shares the persistent tiers by
	// design (schemas/memory.json), never the working tier.
	m = b.call(ctx, "memory/init/req", map[string]any{"namespace": k.name("isolation")})
	if k.want(st, m, "memory/init/resp", "B's memory/init of the same namespace") {
		m = b.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": str(m.body, "memory_id"), "keys": []any{key}, "tier": "working"})
		if k.want(st, m, "memory/retrieve/resp", "B retrieves A's working key from its own memory") {
			k.expect(st, len(arr(m.body, "entries")) == 0, "B reads A's working entry %s: %s", key, m)
		}
	}
	m = a.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{key}})
	if k.want(st, m, "memory/retrieve/resp", "A retrieves its entry after B's attempts") {
		c, _ := get(m.body, "entries.0.content")
		k.expect(st, equal(c, "A's"), "A's working entry is %s after B's attempts, want \"A's\"", show(c))
	}
}

func (k *kit) isolateEnv(ctx context.Context, a, b *session) {
	st := CheckIsolationState
	ep := k.opts.Fixture.Env
	if ep == nil || ep.Episode == nil {
		k.skip("needs fixture env.episode for its episodes", st)
		return
	}
	m := a.call(ctx, "env/reset/req", k.resetBody(ep.Episode, nil))
	if !k.want(st, m, "env/reset/resp", "A resets an episode") {
		return
	}
	eid := str(m.body, "episode_id")
	k.wantError(st, b.call(ctx, "env/step/req", map[string]any{"episode_id": eid, "action": ep.Episode.Action}), "B steps A's episode")
	k.wantError(st, b.call(ctx, "env/observe/req", map[string]any{"episode_id": eid}), "B observes A's episode")
	k.wantRefusal(st, b.call(ctx, "env/close/req", map[string]any{"episode_id": eid}), "env/close/resp", "B closes A's episode")
	m = a.call(ctx, "env/observe/req", map[string]any{"episode_id": eid})
	if k.want(st, m, "env/observe/resp", "A observes its episode after B's attempts") {
		step, _ := num(m.body, "step")
		k.expect(st, step == 0, "A's episode is at step %v after B's attempts, want 0", step)
	}
	a.call(ctx, "env/close/req", map[string]any{"episode_id": eid})
}

func (k *kit) isolateProc(ctx context.Context, a, b *session) {
	st := CheckIsolationState
	pf := k.opts.Fixture.Proc
	if pf == nil || len(pf.Long) == 0 {
		k.skip("needs fixture proc.long for its processes", st)
		return
	}
	m := a.call(ctx, "proc/spawn/req", map[string]any{"argv": pf.Long})
	if !k.want(st, m, "proc/spawn/resp", "A spawns a process") {
		return
	}
	pid := str(m.body, "process.proc_id")
	defer a.call(ctx, "proc/kill/req", map[string]any{"proc_id": pid})
	k.wantError(st, b.call(ctx, "proc/status/req", map[string]any{"proc_id": pid}), "B asks for the status of A's process")
	k.wantError(st, b.call(ctx, "proc/kill/req", map[string]any{"proc_id": pid}), "B kills A's process")
	k.wantError(st, b.call(ctx, "proc/write/req", map[string]any{"proc_id": pid, "data": "x"}), "B writes to A's process")
	m = b.call(ctx, "proc/list/req", nil)
	if k.want(st, m, "proc/list/resp", "B lists its processes") {
		for _, p := range arr(m.body, "processes") {
			k.expect(st, str(p, "proc_id") != pid, "B's proc/list holds A's process %s", pid)
		}
	}
	m = a.call(ctx, "proc/status/req", map[string]any{"proc_id": pid})
	if k.want(st, m, "proc/status/resp", "A's process after B's attempts") {
		k.expect(st, str(m.body, "process.state") == "running", "A's process is %s after B's attempts, want running", str(m.body, "process.state"))
	}
}

func (k *kit) isolateSnapshots(ctx context.Context, a, b *session) {
	st := CheckIsolationState
	m := a.call(ctx, "session/snapshot/req", nil)
	if !k.want(st, m, "session/snapshot/resp", "A takes a snapshot") {
		return
	}
	sid := str(m.body, "snapshot_id")
	defer a.call(ctx, "session/snapshot/delete/req", map[string]any{"snapshot_id": sid})
	m = b.call(ctx, "session/snapshot/list/req", nil)
	if k.want(st, m, "session/snapshot/list/resp", "B lists its snapshots") {
		for _, x := range arr(m.body, "snapshots") {
			k.expect(st, str(x, "snapshot_id") != sid, "B's snapshot list holds A's snapshot %s", sid)
		}
	}
	k.wantRefusal(st, b.call(ctx, "session/snapshot/delete/req", map[string]any{"snapshot_id": sid}), "session/snapshot/delete/resp", "B deletes A's snapshot")
	m = a.call(ctx, "session/snapshot/list/req", nil)
	if k.want(st, m, "session/snapshot/list/resp", "A lists its snapshots after B's attempt") {
		found := false
		for _, x := range arr(m.body, "snapshots") {
			found = found || str(x, "snapshot_id") == sid
		}
		k.expect(st, found, "A's snapshot %s is gone after B tried to delete it", sid)
	}
}

func (k *kit) isolateSubagents(ctx context.Context, a, b *session, handleA string) {
	st := CheckIsolationState
	m := a.call(ctx, "subagent/spawn/req", map[string]any{"name": k.name("a-child"), "capabilities": []any{}})
	if !k.want(st, m, "subagent/spawn/resp", "A spawns a subagent") {
		return
	}
	sub := str(m.body, "subagent_id")
	defer a.call(ctx, "subagent/terminate/req", map[string]any{"subagent_id": sub})
	k.wantError(st, b.call(ctx, "subagent/status/req", map[string]any{"subagent_id": sub}), "B asks for the status of A's subagent")
	k.wantRefusal(st, b.call(ctx, "subagent/terminate/req", map[string]any{"subagent_id": sub}), "subagent/terminate/resp", "B terminates A's subagent")
	if handleA != "" {
		k.wantError(st, b.call(ctx, "subagent/status/req", map[string]any{"subagent_id": handleA}), "B asks for A's public handle as a subagent")
	}
	m = b.call(ctx, "subagent/list/req", nil)
	if k.want(st, m, "subagent/list/resp", "B lists its subagents") {
		for _, x := range arr(m.body, "subagents") {
			k.expect(st, str(x, "subagent_id") != sub, "B's subagent list holds A's subagent %s", sub)
		}
	}
	m = a.call(ctx, "subagent/status/req", map[string]any{"subagent_id": sub})
	if k.want(st, m, "subagent/status/resp", "A's subagent after B's attempts") {
		status := str(m.body, "subagent.status")
		k.expect(st, status != "terminated", "A's subagent is %s after B's attempt to terminate it", status)
	}
}

func (k *kit) isolateToolkits(ctx context.Context, a, b *session) {
	st := CheckIsolationState
	tf := k.opts.Fixture.Toolkits
	if tf == nil || tf.Configure == nil {
		k.skip("needs fixture toolkits.configure for a configured toolkit", st)
		return
	}
	name := tf.Configure.ToolkitName
	m := a.call(ctx, "toolkit/configure/req", map[string]any{"toolkit_name": name, "config": tf.Configure.Config})
	if !k.want(st, m, "toolkit/configure/resp", "A configures "+name) || str(m.body, "status") != "ok" {
		return
	}
	m = b.call(ctx, "toolkit/list/req", nil)
	if k.want(st, m, "toolkit/list/resp", "B lists toolkits") {
		for _, t := range arr(m.body, "toolkits") {
			if str(t, "name") == name {
				configured, _ := boolean(t, "configured")
				k.expect(st, !configured, "B sees %s configured by A", name)
			}
		}
	}
	if k.offered["tools"] {
		m = b.call(ctx, "tool/list/req", map[string]any{"include_deferred": true})
		if k.want(st, m, "tool/list/resp", "B lists tools") {
			for _, t := range arr(m.body, "tools") {
				k.expect(st, str(t, "toolkit") != name, "B's tool list holds %s of the toolkit %s configured by A", str(t, "name"), name)
			}
		}
	}
}

// resetBody is an env/reset/req body for the fixture's episode.
func (k *kit) resetBody(ep *EpisodeFixture, episode *string) map[string]any {
	seed := int64(7)
	if ep.Seed != nil {
		seed = *ep.Seed
	}
	body := map[string]any{"env_name": ep.EnvName, "seed": seed}
	if ep.Options != nil {
		body["options"] = ep.Options
	}
	if episode != nil {
		body["episode_id"] = *episode
	}
	return body
}
