package conformance

import "context"

// chains: a chain's result comes from its nodes (schemas/chains.json).
// The kit's own chains send session/info/req, which every session may
// send (the always-on session namespace), so they need no host content.
func (k *kit) chains(ctx context.Context) error {
	all := []string{CheckChainsRun, CheckChainsDefine, CheckChainsInvalid, CheckChainsFailure, CheckChainsFixture}
	if !k.offers("chains", all...) {
		return nil
	}
	s := k.sessionFor(ctx, CheckChainsRun, "chains", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	c := CheckChainsRun
	info := map[string]any{"id": "info", "kind": "action", "request": map[string]any{"type": "session/info/req", "body": map[string]any{}}}
	chain := map[string]any{
		"nodes": []any{
			info,
			map[string]any{"id": "sum", "kind": "reduce", "items": []any{1, 2, 3}, "expr": "acc + item", "initial": 0},
			map[string]any{"id": "big", "kind": "branch", "condition": "input.n > 2"},
			map[string]any{"id": "yes", "kind": "gather"},
			map[string]any{"id": "no", "kind": "gather"},
			map[string]any{"id": "both", "kind": "gather"},
		},
		"edges": []any{
			map[string]any{"from": "info", "to": "both"},
			map[string]any{"from": "sum", "to": "both"},
			map[string]any{"from": "big", "to": "yes", "when": true},
			map[string]any{"from": "big", "to": "no", "when": false},
		},
		"output": "both",
	}
	// The kit's chains run nodes in parallel: which finishes first, and
	// the progress each event reports, is a race (compareUnordered).
	m := s.callAs(ctx, compareUnordered, "chain/run/req", map[string]any{"chain": chain, "input": map[string]any{"n": 3}})
	if k.want(c, m, "chain/run/resp", "chain/run of the kit's chain") {
		success, _ := boolean(m.body, "success")
		k.expect(c, success, "the kit's chain failed: %s", m)
		k.expect(c, str(m.body, "outputs.info.agent_id") == k.opts.AgentID, "the action node's output is not its reply (session/info names agent_id %q): %s", str(m.body, "outputs.info.agent_id"), show(obj(m.body, "outputs")["info"]))
		sum, _ := num(m.body, "outputs.sum")
		k.expect(c, sum == 6, "the reduce node's output is %v, want 6 (1+2+3)", obj(m.body, "outputs")["sum"])
		big, _ := boolean(m.body, "outputs.big")
		k.expect(c, big, "the branch node's output is %v, want true (input.n is 3)", obj(m.body, "outputs")["big"])
		ran, skipped := strs(m.body, "ran"), strs(m.body, "skipped")
		for _, n := range []string{"info", "sum", "big", "yes", "both"} {
			k.expect(c, containsString(ran, n), "node %s is not in ran %v", n, ran)
		}
		k.expect(c, containsString(skipped, "no") && !containsString(ran, "no"), "the branch not taken (no) is not skipped: ran %v, skipped %v", ran, skipped)
		final := obj(m.body, "final_output")
		fsum, _ := num(final, "sum")
		k.expect(c, fsum == 6 && str(final, "info.agent_id") == k.opts.AgentID, "final_output is not the output of the node named (both: the gather of info and sum): %s", show(m.body["final_output"]))
		k.expect(c, len(arr(m.body, "failed")) == 0, "the kit's chain reports failed nodes: %s", show(m.body["failed"]))
	}

	d := CheckChainsDefine
	name := k.name("chain")
	m = s.call(ctx, "chain/define/req", map[string]any{"name": name, "chain": chain})
	if k.want(d, m, "chain/define/resp", "chain/define") {
		n, _ := num(m.body, "nodes")
		k.expect(d, str(m.body, "name") == name && n == 6, "chain/define of 6 nodes: %s", m)
		m = s.callAs(ctx, compareUnordered, "chain/run/req", map[string]any{"name": name, "input": map[string]any{"n": 1}})
		if k.want(d, m, "chain/run/resp", "chain/run by name") {
			big, _ := boolean(m.body, "outputs.big")
			sum, _ := num(m.body, "final_output.sum")
			k.expect(d, !big && sum == 6 && containsString(strs(m.body, "ran"), "no"), "the defined chain run with n 1: %s, want the branch false (no ran) and final_output.sum 6", m)
		}
	}
	k.wantRefusal(d, s.call(ctx, "chain/run/req", map[string]any{"name": k.name("no-such-chain")}), "chain/run/resp", "chain/run of an unknown name")

	v := CheckChainsInvalid
	cycle := map[string]any{
		"nodes": []any{info, map[string]any{"id": "a", "kind": "gather"}, map[string]any{"id": "b", "kind": "gather"}},
		"edges": []any{map[string]any{"from": "info", "to": "a"}, map[string]any{"from": "a", "to": "b"}, map[string]any{"from": "b", "to": "a"}},
	}
	k.wantError(v, s.call(ctx, "chain/run/req", map[string]any{"chain": cycle}), "a chain with a cycle", "schema_violation")
	ghost := map[string]any{"nodes": []any{info}, "edges": []any{map[string]any{"from": "info", "to": "ghost"}}}
	k.wantError(v, s.call(ctx, "chain/run/req", map[string]any{"chain": ghost}), "a chain with an edge to an unknown node", "schema_violation")

	f := CheckChainsFailure
	failing := func(onError string) map[string]any {
		n := map[string]any{"id": "bad", "kind": "action", "request": map[string]any{"type": "session/restore/req", "body": map[string]any{"snapshot_id": k.name("no-such-snapshot")}}}
		if onError != "" {
			n["on_error"] = onError
		}
		return map[string]any{"nodes": []any{n, info}}
	}
	m = s.callAs(ctx, compareUnordered, "chain/run/req", map[string]any{"chain": failing("skip")})
	if k.want(f, m, "chain/run/resp", "a chain whose node fails, on_error skip") {
		success, _ := boolean(m.body, "success")
		failed := arr(m.body, "failed")
		k.expect(f, success, "a node failing with on_error skip failed the chain: %s", m)
		k.expect(f, len(failed) == 1 && str(failed[0], "node") == "bad" && str(failed[0], "code") != "", "a node failing with on_error skip: failed %s, want the node bad with its code", show(failed))
		k.expect(f, containsString(strs(m.body, "ran"), "info"), "with on_error skip the other node did not run: %s", m)
	}
	// Whether info ran, or was stopped when bad failed, is a race.
	m = s.callAs(ctx, compareLoose, "chain/run/req", map[string]any{"chain": failing("")})
	if k.want(f, m, "chain/run/resp", "a chain whose node fails, on_error abort (the default)") {
		success, _ := boolean(m.body, "success")
		k.expect(f, !success && str(m.body, "error.node") == "bad", "a node failing with on_error abort: %s, want success false and error naming bad", m)
	}

	var fix *ChainRun
	if cf := k.opts.Fixture.Chains; cf != nil {
		fix = cf.Run
	}
	if fix == nil {
		k.skip("needs fixture chains.run", CheckChainsFixture)
		return nil
	}
	body := map[string]any{"chain": fix.Chain}
	if fix.Input != nil {
		body["input"] = fix.Input
	}
	m = s.call(ctx, "chain/run/req", body)
	if k.want(CheckChainsFixture, m, "chain/run/resp", "the fixture's chain") {
		success, _ := boolean(m.body, "success")
		k.expect(CheckChainsFixture, success, "the fixture's chain failed: %s", m)
		if fix.FinalOutput != nil {
			k.expect(CheckChainsFixture, holds(m.body["final_output"], fix.FinalOutput), "the fixture's chain: final_output %s does not hold %s", show(m.body["final_output"]), show(fix.FinalOutput))
		}
	}
	return nil
}
