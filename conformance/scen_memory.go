package conformance

import "context"

// memory: what is stored is what is retrieved, by key and tier; recall
// finds it (its ranking is not judged); stats counts it; forget removes it
// (schemas/memory.json).
func (k *kit) memory(ctx context.Context) error {
	if !k.offers("memory", CheckMemoryRoundTrip, CheckMemoryErrors) {
		return nil
	}
	s := k.sessionFor(ctx, CheckMemoryRoundTrip, "memory", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	c := CheckMemoryRoundTrip
	ns := k.name("memory")
	m := s.call(ctx, "memory/init/req", map[string]any{"namespace": ns})
	if !k.want(c, m, "memory/init/resp", "memory/init") {
		return nil
	}
	mid := str(m.body, "memory_id")
	k.expect(c, mid != "", "memory/init gave no memory_id: %s", m)
	k.expect(c, str(m.body, "namespace") == ns, "memory/init names the namespace %q, asked %q", str(m.body, "namespace"), ns)
	ok, _ := boolean(m.body, "success")
	k.expect(c, ok, "memory/init: success is not true: %s", m)

	work, sem, missing := k.name("working"), k.name("semantic"), k.name("missing")
	word := "zq" + k.uniq + "xv" // a word no other entry holds
	workContent := map[string]any{"n": 1.0, "s": "text", "list": []any{true, nil}}
	semContent := "a note about " + word
	m = s.call(ctx, "memory/store/req", map[string]any{"memory_id": mid, "entries": []any{
		map[string]any{"key": work, "content": workContent, "tier": "working"},
		map[string]any{"key": sem, "content": semContent, "tier": "semantic", "tags": []any{"aep-conformance"}},
	}})
	if k.want(c, m, "memory/store/resp", "memory/store of a working and a semantic entry") {
		k.expect(c, equal(strs(m.body, "stored"), []string{work, sem}), "memory/store: stored %v, want the keys in request order %v", strs(m.body, "stored"), []string{work, sem})
	}
	m = s.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{work, sem, missing}})
	if k.want(c, m, "memory/retrieve/resp", "memory/retrieve of both keys and a missing one") {
		byKey := map[string]any{}
		for _, e := range arr(m.body, "entries") {
			byKey[str(e, "key")] = e
		}
		for _, want := range []struct {
			key, tier string
			content   any
		}{{work, "working", workContent}, {sem, "semantic", semContent}} {
			e, ok := byKey[want.key]
			if !k.expect(c, ok, "memory/retrieve lacks %s: %s", want.key, m) {
				continue
			}
			got, _ := get(e, "content")
			k.expect(c, equal(got, want.content), "memory/retrieve of %s: content %s, stored %s", want.key, show(got), show(want.content))
			k.expect(c, str(e, "tier") == want.tier, "memory/retrieve of %s: tier %q, stored %q", want.key, str(e, "tier"), want.tier)
		}
		k.expect(c, equal(strs(m.body, "missing"), []string{missing}), "memory/retrieve: missing %v, want [%s]", strs(m.body, "missing"), missing)
	}
	m = s.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{sem}, "tier": "working"})
	if k.want(c, m, "memory/retrieve/resp", "memory/retrieve of the semantic key in the working tier") {
		k.expect(c, len(arr(m.body, "entries")) == 0 && equal(strs(m.body, "missing"), []string{sem}), "memory/retrieve of a semantic key with tier working: %s, want it missing", m)
	}
	// Upserted by key.
	m = s.call(ctx, "memory/store/req", map[string]any{"memory_id": mid, "entries": []any{map[string]any{"key": work, "content": "second", "tier": "working"}}})
	k.want(c, m, "memory/store/resp", "memory/store of the working key again")
	m = s.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{work}})
	if k.want(c, m, "memory/retrieve/resp", "memory/retrieve after the second store") {
		got, _ := get(m.body, "entries.0.content")
		k.expect(c, len(arr(m.body, "entries")) == 1 && equal(got, "second"), "the working key after a second store: %s, want one entry with content \"second\"", m)
	}
	m = s.call(ctx, "memory/recall/req", map[string]any{"memory_id": mid, "query": word})
	if k.want(c, m, "memory/recall/resp", "memory/recall of a word only the semantic entry holds") {
		found := false
		for _, h := range arr(m.body, "hits") {
			found = found || str(h, "entry.key") == sem
		}
		k.expect(c, found, "memory/recall of %q does not find %s: %s", word, sem, m)
	}
	m = s.call(ctx, "memory/stats/req", map[string]any{"memory_id": mid})
	if k.want(c, m, "memory/stats/resp", "memory/stats") {
		k.expect(c, str(m.body, "memory_id") == mid, "memory/stats names %q", str(m.body, "memory_id"))
		for _, t := range arr(m.body, "tiers") {
			if str(t, "tier") == "working" {
				n, _ := num(t, "entries")
				k.expect(c, n >= 1, "memory/stats counts %v working entries, one is stored", n)
			}
		}
	}
	m = s.call(ctx, "memory/forget/req", map[string]any{"memory_id": mid, "keys": []any{work, sem}})
	if k.want(c, m, "memory/forget/resp", "memory/forget of both keys") {
		n, _ := num(m.body, "deleted")
		k.expect(c, n >= 2, "memory/forget of two stored keys deleted %v", n)
	}
	m = s.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{work, sem}})
	if k.want(c, m, "memory/retrieve/resp", "memory/retrieve after forget") {
		k.expect(c, len(arr(m.body, "entries")) == 0, "entries are still retrieved after forget: %s", m)
	}

	e := CheckMemoryErrors
	k.wantNotFound(e, s.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": k.name("no-such-memory"), "keys": []any{work}}), "memory/retrieve with an unknown memory_id")
	k.wantError(e, s.call(ctx, "memory/forget/req", map[string]any{"memory_id": mid}), "memory/forget without a selector", "schema_violation")
	return nil
}
