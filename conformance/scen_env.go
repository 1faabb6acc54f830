package conformance

import "context"

// env: episodes (spec §4.2 Env episode, schemas/env.json) with the
// fixture's environment and action, and the data plane by the spec's exact
// types (spec §4.2 Env data plane).
func (k *kit) env(ctx context.Context) error {
	all := []string{CheckEnvList, CheckEnvEpisode, CheckEnvSeed, CheckEnvBatch, CheckEnvErrors, CheckEnvData}
	if !k.offers("env", all...) {
		return nil
	}
	s := k.sessionFor(ctx, CheckEnvList, "env", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	names := map[string]bool{}
	m := s.call(ctx, "env/list/req", nil)
	if k.want(CheckEnvList, m, "env/list/resp", "env/list") {
		for i, e := range arr(m.body, "envs") {
			name := str(e, "env_name")
			names[name] = true
			if i >= 8 {
				continue // a host with many environments: the first few
			}
			sp := s.call(ctx, "env/spaces/req", map[string]any{"env_name": name})
			if k.want(CheckEnvList, sp, "env/spaces/resp", "env/spaces of "+name) {
				k.expect(CheckEnvList, str(sp.body, "env_name") == name, "env/spaces of %s names %q", name, str(sp.body, "env_name"))
			}
		}
	}
	k.wantNotFound(CheckEnvErrors, s.call(ctx, "env/reset/req", map[string]any{"env_name": k.name("no-such-env")}), "env/reset of an unknown environment")
	k.wantNotFound(CheckEnvErrors, s.call(ctx, "env/step/req", map[string]any{"episode_id": k.name("no-such-episode"), "action": 0}), "env/step of an unknown episode")

	var ep *EpisodeFixture
	if f := k.opts.Fixture.Env; f != nil {
		ep = f.Episode
	}
	if ep == nil {
		k.skip("needs fixture env.episode", CheckEnvEpisode, CheckEnvSeed, CheckEnvBatch)
		return k.envData(ctx, s, nil)
	}
	c := CheckEnvEpisode
	k.expect(CheckEnvList, names[ep.EnvName], "env/list lacks the fixture's environment %s", ep.EnvName)
	r1 := s.call(ctx, "env/reset/req", k.resetBody(ep, nil))
	if !k.want(c, r1, "env/reset/resp", "env/reset of "+ep.EnvName) {
		return k.envData(ctx, s, nil)
	}
	e1 := str(r1.body, "episode_id")
	k.expect(c, e1 != "", "env/reset gave no episode_id: %s", r1)
	k.expect(c, str(r1.body, "env_name") == ep.EnvName, "env/reset names the environment %q, asked %q", str(r1.body, "env_name"), ep.EnvName)
	k.expect(c, obj(r1.body, "info") != nil, "env/reset: info is not an object: %s", r1)
	s1 := s.call(ctx, "env/step/req", map[string]any{"episode_id": e1, "action": ep.Action})
	var terminated, truncated bool
	if k.want(c, s1, "env/step/resp", "env/step after the reset") {
		k.expect(c, str(s1.body, "episode_id") == e1, "env/step names the episode %q, stepped %q", str(s1.body, "episode_id"), e1)
		step, _ := num(s1.body, "step")
		k.expect(c, step == 1, "the first env/step after a reset is step %v, want 1", step)
		terminated, _ = boolean(s1.body, "terminated")
		truncated, _ = boolean(s1.body, "truncated")
	}
	o := s.call(ctx, "env/observe/req", map[string]any{"episode_id": e1})
	if k.want(c, o, "env/observe/resp", "env/observe after a step") {
		step, _ := num(o.body, "step")
		k.expect(c, step == 1, "env/observe after one step says step %v", step)
		k.expect(c, str(o.body, "env_name") == ep.EnvName, "env/observe names the environment %q", str(o.body, "env_name"))
		want := "running"
		if terminated {
			want = "terminated"
		} else if truncated {
			want = "truncated"
		}
		k.expect(c, str(o.body, "status") == want, "env/observe: status %q after a step with terminated %v, truncated %v; want %s", str(o.body, "status"), terminated, truncated, want)
		k.expect(c, equal(o.body["observation"], s1.body["observation"]), "env/observe's observation %s is not the last step's %s", show(o.body["observation"]), show(s1.body["observation"]))
	}
	if r := s.call(ctx, "env/render/req", map[string]any{"episode_id": e1}); k.want(c, r, "env/render/resp", "env/render") {
		k.expect(c, str(r.body, "episode_id") == e1, "env/render names the episode %q", str(r.body, "episode_id"))
	}
	if sp := s.call(ctx, "env/spaces/req", map[string]any{"episode_id": e1}); k.want(c, sp, "env/spaces/resp", "env/spaces of the episode") {
		k.expect(c, str(sp.body, "env_name") == ep.EnvName, "env/spaces of the episode names %q", str(sp.body, "env_name"))
	}

	// The same seed and action: the same observations.
	r2 := s.call(ctx, "env/reset/req", k.resetBody(ep, nil))
	e2 := ""
	if k.want(CheckEnvSeed, r2, "env/reset/resp", "a second env/reset with the same seed") {
		e2 = str(r2.body, "episode_id")
		k.expect(CheckEnvSeed, e2 != e1, "a second env/reset gave the same episode_id %q", e1)
		k.expect(CheckEnvSeed, equal(r1.body["observation"], r2.body["observation"]), "the same seed: reset observations %s and %s", show(r1.body["observation"]), show(r2.body["observation"]))
		s2 := s.call(ctx, "env/step/req", map[string]any{"episode_id": e2, "action": ep.Action})
		if k.want(CheckEnvSeed, s2, "env/step/resp", "the step of the second episode") && s1.is("env/step/resp") {
			k.expect(CheckEnvSeed, equal(s1.body["observation"], s2.body["observation"]) && equal(s1.body["reward"], s2.body["reward"]),
				"the same seed and action: step observations %s and %s, rewards %v and %v", show(s1.body["observation"]), show(s2.body["observation"]), s1.body["reward"], s2.body["reward"])
		}
	}
	// A reset of the same episode restarts it.
	r3 := s.call(ctx, "env/reset/req", k.resetBody(ep, &e1))
	if k.want(c, r3, "env/reset/resp", "env/reset of the open episode") {
		k.expect(c, str(r3.body, "episode_id") == e1, "env/reset with episode_id %q started %q", e1, str(r3.body, "episode_id"))
		if o := s.call(ctx, "env/observe/req", map[string]any{"episode_id": e1}); k.want(c, o, "env/observe/resp", "env/observe after the reset") {
			step, _ := num(o.body, "step")
			k.expect(c, step == 0 && str(o.body, "status") == "running", "after a reset the episode is at step %v, %s; want 0, running", step, str(o.body, "status"))
		}
	}
	if e2 != "" {
		b := s.call(ctx, "env/step_batch/req", map[string]any{"episode_ids": []any{e1, e2}, "actions": []any{ep.Action, ep.Action}})
		if k.want(CheckEnvBatch, b, "env/step_batch/resp", "env/step_batch of two episodes") {
			res := arr(b.body, "results")
			if k.expect(CheckEnvBatch, len(res) == 2, "env/step_batch of two episodes gave %d results", len(res)) {
				for i, id := range []string{e1, e2} {
					k.expect(CheckEnvBatch, str(res[i], "episode_id") == id, "env/step_batch result %d names %q, want %q", i, str(res[i], "episode_id"), id)
				}
				step, _ := num(res[0], "step")
				k.expect(CheckEnvBatch, step == 1, "env/step_batch: the just-reset episode is at step %v, want 1", step)
			}
		}
	} else {
		k.skip("no second episode", CheckEnvBatch)
	}
	if err := k.envData(ctx, s, ep); err != nil {
		return err
	}
	cl := s.call(ctx, "env/close/req", map[string]any{"episode_id": e1})
	if k.want(c, cl, "env/close/resp", "env/close") {
		closed, _ := boolean(cl.body, "closed")
		k.expect(c, closed && str(cl.body, "episode_id") == e1, "env/close: %s, want closed true for %s", cl, e1)
	}
	// A closed episode is a condition of state: runtime_error, never a
	// schema_violation (the request is well-formed).
	k.wantError(c, s.call(ctx, "env/step/req", map[string]any{"episode_id": e1, "action": ep.Action}), "env/step of a closed episode", "runtime_error")
	k.wantError(CheckEnvErrors, s.call(ctx, "env/observe/req", map[string]any{"episode_id": e1}), "env/observe of a closed episode", "runtime_error")
	if e2 != "" {
		s.call(ctx, "env/close/req", map[string]any{"episode_id": e2})
	}
	return nil
}

// envData: the data plane by the spec's exact types (env/data/reset,
// env/data/add, env/data/get); with the fixture's part, what is staged
// is listed with its checksum, an episode reset leaves it (spec §3) and a
// data reset removes it.
func (k *kit) envData(ctx context.Context, s *session, ep *EpisodeFixture) error {
	c := CheckEnvData
	m := s.call(ctx, "env/data/reset", nil)
	if k.want(c, m, "env/data/reset/resp", "env/data/reset") {
		n, ok := num(m.body, "restored")
		k.expect(c, ok && n >= 0 && n == float64(int64(n)), "env/data/reset: restored %v is not a count", m.body["restored"])
	}
	m = s.call(ctx, "env/data/get", nil)
	k.want(c, m, "env/data/get/resp", "env/data/get")
	var part *DataPart
	if f := k.opts.Fixture.Env; f != nil {
		part = f.DataPart
	}
	if part == nil {
		return nil
	}
	listed := func(what string) (bool, string) {
		m := s.call(ctx, "env/data/get", map[string]any{"path": part.Path})
		if m.isError() {
			return false, "" // a path that is not there may be an error
		}
		if !k.want(c, m, "env/data/get/resp", what) {
			return false, ""
		}
		for _, f := range arr(m.body, "files") {
			if str(f, "path") == part.Path {
				return true, str(f, "sha256")
			}
		}
		return false, ""
	}
	m = s.call(ctx, "env/data/add", map[string]any{"parts": []any{map[string]any{"path": part.Path, "source": part.Source, "sha256": part.SHA256, "size": part.Size}}})
	if !k.want(c, m, "env/data/add/resp", "env/data/add of the fixture's part") {
		return nil
	}
	found := false
	for _, f := range arr(m.body, "added") {
		if str(f, "path") == part.Path {
			found = true
			k.expect(c, str(f, "sha256") == part.SHA256, "env/data/add: %s has sha256 %s, staged %s", part.Path, str(f, "sha256"), part.SHA256)
			size, _ := num(f, "size")
			k.expect(c, int64(size) == part.Size, "env/data/add: %s has size %v, staged %d", part.Path, size, part.Size)
		}
	}
	k.expect(c, found, "env/data/add does not list %s as added: %s", part.Path, m)
	ok, sum := listed("env/data/get of the staged path")
	k.expect(c, ok && sum == part.SHA256, "env/data/get does not list %s with its checksum after env/data/add", part.Path)
	if ep != nil {
		if r := s.call(ctx, "env/reset/req", k.resetBody(ep, nil)); r.is("env/reset/resp") {
			ok, _ := listed("env/data/get after an episode reset")
			k.expect(c, ok, "an episode reset removed %s from the data root (spec §3: it never touches it)", part.Path)
			s.call(ctx, "env/close/req", map[string]any{"episode_id": str(r.body, "episode_id")})
		}
	}
	m = s.call(ctx, "env/data/reset", nil)
	if k.want(c, m, "env/data/reset/resp", "env/data/reset after staging") {
		ok, _ := listed("env/data/get after env/data/reset")
		k.expect(c, !ok, "%s is still in the data root after env/data/reset", part.Path)
	}
	return nil
}
