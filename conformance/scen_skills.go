package conformance

import "context"

// skills: discover, get and the fixture's call (schemas/skills.json); the
// call's events are held to its result by the traffic checks
// (events.collected).
func (k *kit) skills(ctx context.Context) error {
	if !k.offers("skills", CheckSkillsDiscover, CheckSkillsCall, CheckSkillsErrors) {
		return nil
	}
	s := k.sessionFor(ctx, CheckSkillsDiscover, "skills", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	c := CheckSkillsDiscover
	m := s.call(ctx, "skill/discover/req", nil)
	if k.want(c, m, "skill/discover/resp", "skill/discover") {
		for i, sk := range arr(m.body, "skills") {
			name, version := str(sk, "name"), str(sk, "version")
			k.expect(c, name != "" && version != "", "skill/discover lists a skill without name or version: %s", show(sk))
			if i >= 4 || name == "" {
				continue
			}
			g := s.call(ctx, "skill/get/req", map[string]any{"name": name, "version": version})
			if k.want(c, g, "skill/get/resp", "skill/get of "+name) {
				k.expect(c, str(g.body, "skill.name") == name && str(g.body, "skill.version") == version, "skill/get of %s %s gave %s %s", name, version, str(g.body, "skill.name"), str(g.body, "skill.version"))
			}
		}
	}
	e := CheckSkillsErrors
	none := k.name("no-such-skill")
	k.wantNotFound(e, s.call(ctx, "skill/get/req", map[string]any{"name": none}), "skill/get of an unknown skill")
	k.wantRefusal(e, s.call(ctx, "skill/call/req", map[string]any{"name": none}), "skill/call/resp", "skill/call of an unknown skill")

	var call *SkillCall
	if f := k.opts.Fixture.Skills; f != nil {
		call = f.Call
	}
	if call == nil {
		k.skip("needs fixture skills.call", CheckSkillsCall)
		return nil
	}
	cc := CheckSkillsCall
	body := map[string]any{"name": call.Name}
	if call.Version != "" {
		body["version"] = call.Version
	}
	if call.Arguments != nil {
		body["arguments"] = call.Arguments
	}
	g := s.call(ctx, "skill/get/req", body)
	if k.want(cc, g, "skill/get/resp", "skill/get of the fixture's skill") {
		k.expect(cc, str(g.body, "skill.name") == call.Name, "skill/get of %s gave %q", call.Name, str(g.body, "skill.name"))
	}
	m = s.call(ctx, "skill/call/req", body)
	if k.want(cc, m, "skill/call/resp", "the fixture's skill call") {
		res := obj(m.body, "result")
		success, _ := boolean(res, "success")
		k.expect(cc, success, "the fixture's skill call %s failed: %s", call.Name, m)
		k.expect(cc, str(res, "name") == call.Name, "the skill call's result names %q, called %q", str(res, "name"), call.Name)
		if call.Version != "" {
			k.expect(cc, str(res, "version") == call.Version, "the skill call's result is version %q, called %q", str(res, "version"), call.Version)
		}
		if call.Data != nil {
			k.expect(cc, holds(res["data"], call.Data), "the fixture's skill call: data %s does not hold %s", show(res["data"]), show(call.Data))
		}
	}
	return nil
}
