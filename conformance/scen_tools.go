package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

func (k *kit) capabilityScenarios() []scenario {
	return []scenario{
		{[]string{CheckToolsList, CheckToolsUnknown, CheckToolsCall, CheckToolsTimeout, CheckToolsResult, CheckToolsResultError}, k.tools},
		{[]string{CheckToolkitsList, CheckToolkitsErrors, CheckToolkitsConfigure}, k.toolkits},
		{[]string{CheckMemoryRoundTrip, CheckMemoryErrors}, k.memory},
		{[]string{CheckEnvList, CheckEnvEpisode, CheckEnvSeed, CheckEnvBatch, CheckEnvErrors, CheckEnvData}, k.env},
		{[]string{CheckProcLifecycle, CheckProcKill, CheckProcErrors}, k.proc},
		{[]string{CheckLearnFeedback, CheckLearnExperience, CheckLearnRank}, k.learn},
		{[]string{CheckSkillsDiscover, CheckSkillsCall, CheckSkillsErrors}, k.skills},
		{[]string{CheckChainsRun, CheckChainsDefine, CheckChainsInvalid, CheckChainsFailure, CheckChainsFixture}, k.chains},
		{[]string{CheckMCPServers, CheckMCPServer}, k.mcp},
		{[]string{CheckSubagents, CheckSubagentsErrors, CheckSubagentGating}, k.subagents},
		{[]string{CheckSessionInfo, CheckSessionSnapshot, CheckSessionFork, CheckSessionTrajectory}, k.sessionNS},
		{[]string{CheckSessionOperator}, k.operatorSession},
		{[]string{CheckSessionPoints}, k.points},
	}
}

func toolNames(m *msg) []string {
	var out []string
	for _, t := range arr(m.body, "tools") {
		out = append(out, str(t, "name"))
	}
	return out
}

func (k *kit) tools(ctx context.Context) error {
	checks := []string{CheckToolsList, CheckToolsUnknown, CheckToolsCall, CheckToolsTimeout}
	if !k.offers("tools", checks...) {
		k.skip("the host does not offer tools", CheckToolsResult, CheckToolsResultError)
		return nil
	}
	s := k.sessionFor(ctx, CheckToolsList, "tools", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	c := CheckToolsList
	m := s.call(ctx, "tool/list/req", nil)
	if k.want(c, m, "tool/list/resp", "tool/list") {
		tools := arr(m.body, "tools")
		names := toolNames(m)
		k.expect(c, sort.StringsAreSorted(names), "tool/list is not sorted by name: %v", names)
		seen := map[string]bool{}
		for _, t := range tools {
			n := str(t, "name")
			k.expect(c, !seen[n], "tool/list names %s twice", n)
			seen[n] = true
			d, _ := boolean(t, "defer_loading")
			k.expect(c, !d, "tool/list holds the deferred tool %s without include_deferred", n)
		}
		all := s.call(ctx, "tool/list/req", map[string]any{"include_deferred": true})
		if k.want(c, all, "tool/list/resp", "tool/list with include_deferred") {
			more := map[string]bool{}
			for _, n := range toolNames(all) {
				more[n] = true
			}
			for _, n := range names {
				k.expect(c, more[n], "tool/list with include_deferred lacks %s, which the default list holds", n)
			}
		}
		if len(tools) > 0 {
			k.toolFilters(ctx, s, tools, names)
		}
	}
	// An unknown tool is a result, never an error message.
	unknown := k.name("no-such-tool")
	m = s.call(ctx, "tool/call/req", map[string]any{"tool_name": unknown, "arguments": map[string]any{}})
	if k.want(CheckToolsUnknown, m, "tool/call/resp", "calling an unknown tool") {
		res := obj(m.body, "result")
		success, _ := boolean(res, "success")
		k.expect(CheckToolsUnknown, !success, "an unknown tool's result has success true: %s", m)
		k.expect(CheckToolsUnknown, str(res, "error_code") == "UNKNOWN_TOOL", "an unknown tool's error_code is %q, want UNKNOWN_TOOL", str(res, "error_code"))
		k.expect(CheckToolsUnknown, str(res, "tool_name") == unknown, "an unknown tool's result names %q", str(res, "tool_name"))
		k.expect(CheckToolsUnknown, len(arr(res, "events")) == 0, "an unknown tool's result has events: %s", m)
	}
	t := k.opts.Fixture.Tools
	if t == nil || t.Call == nil {
		k.skip("needs fixture tools.call", CheckToolsCall)
	} else {
		m = s.call(ctx, "tool/call/req", map[string]any{"tool_name": t.Call.ToolName, "arguments": orEmpty(t.Call.Arguments)})
		if k.want(CheckToolsCall, m, "tool/call/resp", "the fixture's tool call") {
			res := obj(m.body, "result")
			success, _ := boolean(res, "success")
			k.expect(CheckToolsCall, success, "the fixture's tool call %s failed: %s", t.Call.ToolName, m)
			if t.Call.Data != nil {
				k.expect(CheckToolsCall, holds(res["data"], t.Call.Data), "the fixture's tool call %s: data %s does not hold %s", t.Call.ToolName, show(res["data"]), show(t.Call.Data))
			}
		}
	}
	if t == nil || t.Slow == nil {
		k.skip("needs fixture tools.slow", CheckToolsTimeout)
	} else {
		start := time.Now()
		m = s.call(ctx, "tool/call/req", map[string]any{"tool_name": t.Slow.ToolName, "arguments": orEmpty(t.Slow.Arguments), "timeout": 1})
		if k.want(CheckToolsTimeout, m, "tool/call/resp", "the fixture's slow tool call with timeout 1") {
			res := obj(m.body, "result")
			success, _ := boolean(res, "success")
			k.expect(CheckToolsTimeout, !success && str(res, "error_code") == "TOOL_ERROR", "the fixture's slow tool call with timeout 1: %s, want success false and TOOL_ERROR", m)
			k.expect(CheckToolsTimeout, time.Since(start) < 5*time.Second, "the fixture's slow tool call with timeout 1 was answered after %v", time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// toolFilters holds query, tags and paging to their description
// (schemas/tools.json ToolListReq).
func (k *kit) toolFilters(ctx context.Context, s *session, tools []any, names []string) {
	c := CheckToolsList
	first := tools[0]
	q := strings.ToUpper(str(first, "name"))
	m := s.call(ctx, "tool/list/req", map[string]any{"query": q})
	if k.want(c, m, "tool/list/resp", "tool/list with query "+q) {
		got := toolNames(m)
		k.expect(c, containsString(got, str(first, "name")), "tool/list with query %q (case-insensitive) lacks %s", q, str(first, "name"))
		for _, t := range arr(m.body, "tools") {
			text := strings.ToLower(str(t, "name") + "\x00" + str(t, "description") + "\x00" + strings.Join(strs(t, "tags"), "\x00"))
			k.expect(c, strings.Contains(text, strings.ToLower(q)), "tool/list with query %q holds %s, which does not match it", q, str(t, "name"))
		}
	}
	for _, t := range tools {
		tags := strs(t, "tags")
		if len(tags) == 0 {
			continue
		}
		m := s.call(ctx, "tool/list/req", map[string]any{"tags": []any{tags[0]}})
		if k.want(c, m, "tool/list/resp", "tool/list with tags ["+tags[0]+"]") {
			k.expect(c, containsString(toolNames(m), str(t, "name")), "tool/list with tags [%s] lacks %s", tags[0], str(t, "name"))
			for _, x := range arr(m.body, "tools") {
				k.expect(c, containsString(strs(x, "tags"), tags[0]), "tool/list with tags [%s] holds %s, which lacks the tag", tags[0], str(x, "name"))
			}
		}
		break
	}
	// Pages of two, by cursor, are the whole list.
	var paged []string
	cursor := ""
	for i := 0; i <= len(names); i++ {
		body := map[string]any{"limit": 2}
		if cursor != "" {
			body["cursor"] = cursor
		}
		m := s.call(ctx, "tool/list/req", body)
		if !k.want(c, m, "tool/list/resp", fmt.Sprintf("tool/list page %d of 2", i+1)) {
			return
		}
		page := toolNames(m)
		k.expect(c, len(page) <= 2, "tool/list with limit 2 gave %d tools", len(page))
		paged = append(paged, page...)
		cursor = str(m.body, "next_cursor")
		if cursor == "" {
			break
		}
	}
	k.expect(c, equal(paged, names), "tool/list in pages of 2 gives %v, the whole list %v", paged, names)
}

func (k *kit) toolkits(ctx context.Context) error {
	if !k.offers("toolkits", CheckToolkitsList, CheckToolkitsErrors, CheckToolkitsConfigure) {
		return nil
	}
	s := k.sessionFor(ctx, CheckToolkitsList, "toolkits", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	m := s.call(ctx, "toolkit/list/req", nil)
	if !k.want(CheckToolkitsList, m, "toolkit/list/resp", "toolkit/list") {
		return nil
	}
	kits := arr(m.body, "toolkits")
	var listed map[string]bool
	if k.offered["tools"] {
		if tl := s.call(ctx, "tool/list/req", map[string]any{"include_deferred": true}); k.want(CheckToolkitsList, tl, "tool/list/resp", "tool/list") {
			listed = map[string]bool{}
			for _, n := range toolNames(tl) {
				listed[n] = true
			}
		}
	}
	for _, t := range kits {
		name := str(t, "name")
		configured, _ := boolean(t, "configured")
		k.expect(CheckToolkitsList, !configured, "toolkit %s is configured in a fresh session", name)
		if st := str(t, "state"); st != "" {
			k.expect(CheckToolkitsList, st == "installed", "toolkit %s is %s in a fresh session, want installed", name, st)
		}
		for _, tool := range strs(t, "tools") {
			if listed != nil {
				k.expect(CheckToolkitsList, !listed[tool], "tool/list holds %s of the toolkit %s, not configured", tool, name)
			}
		}
	}

	e := CheckToolkitsErrors
	unknown := k.name("no-such-toolkit")
	m = s.call(ctx, "toolkit/configure/req", map[string]any{"toolkit_name": unknown, "config": map[string]any{}})
	if k.want(e, m, "toolkit/configure/resp", "configuring an unknown toolkit") {
		k.expect(e, str(m.body, "status") == "error", "configuring an unknown toolkit: status %q, want error", str(m.body, "status"))
		k.expect(e, str(m.body, "toolkit_name") == unknown, "configuring an unknown toolkit: toolkit_name %q, want the name asked", str(m.body, "toolkit_name"))
	}
	var fix *ToolkitConfig
	if tf := k.opts.Fixture.Toolkits; tf != nil {
		fix = tf.Configure
	}
	for _, t := range kits {
		name := str(t, "name")
		required := strs(t, "schema.required")
		if len(required) > 0 {
			m := s.call(ctx, "toolkit/configure/req", map[string]any{"toolkit_name": name, "config": map[string]any{}})
			if k.want(e, m, "toolkit/configure/resp", "configuring "+name+" with no fields") {
				k.expect(e, str(m.body, "status") == "error", "configuring %s with none of its required fields: status %q, want error", name, str(m.body, "status"))
				for _, r := range required {
					k.expect(e, strings.Contains(str(m.body, "message"), r), "configuring %s with none of its required fields: the message %q does not name %s", name, str(m.body, "message"), r)
				}
			}
		}
		if fix == nil || fix.ToolkitName != name {
			continue
		}
		props := obj(t, "schema.properties")
		for _, p := range sortedKeys(props) {
			enum := arr(props[p], "enum")
			if len(enum) == 0 {
				continue
			}
			config := map[string]any{}
			for key, v := range fix.Config {
				config[key] = v
			}
			config[p] = "aep-conformance-not-allowed"
			m := s.call(ctx, "toolkit/configure/req", map[string]any{"toolkit_name": name, "config": config})
			if k.want(e, m, "toolkit/configure/resp", "configuring "+name+" with "+p+" outside its enum") {
				msgText := str(m.body, "message")
				k.expect(e, str(m.body, "status") == "error", "configuring %s with %s outside its enum: status %q, want error", name, p, str(m.body, "status"))
				k.expect(e, strings.Contains(msgText, p), "configuring %s with %s outside its enum: the message %q does not name the field", name, p, msgText)
				for _, v := range enum {
					k.expect(e, strings.Contains(msgText, fmt.Sprint(v)), "configuring %s with %s outside its enum: the message %q does not name the allowed value %v", name, p, msgText, v)
				}
			}
		}
	}
	if fix == nil {
		k.skip("needs fixture toolkits.configure", CheckToolkitsConfigure)
		return nil
	}
	c := CheckToolkitsConfigure
	m = s.call(ctx, "toolkit/configure/req", map[string]any{"toolkit_name": fix.ToolkitName, "config": fix.Config})
	if !k.want(c, m, "toolkit/configure/resp", "the fixture's configuration") {
		return nil
	}
	if !k.expect(c, str(m.body, "status") == "ok", "the fixture's configuration of %s: %s, want status ok", fix.ToolkitName, m) {
		return nil
	}
	k.expect(c, str(m.body, "toolkit_name") == fix.ToolkitName, "the fixture's configuration: toolkit_name %q", str(m.body, "toolkit_name"))
	m = s.call(ctx, "toolkit/list/req", nil)
	var tools []string
	if k.want(c, m, "toolkit/list/resp", "toolkit/list after the configuration") {
		found := false
		for _, t := range arr(m.body, "toolkits") {
			if str(t, "name") != fix.ToolkitName {
				continue
			}
			found = true
			configured, _ := boolean(t, "configured")
			k.expect(c, configured, "toolkit %s is not configured after status ok", fix.ToolkitName)
			if st := str(t, "state"); st != "" {
				k.expect(c, st == "configured" || st == "running", "toolkit %s is %s after status ok", fix.ToolkitName, st)
			}
			tools = strs(t, "tools")
		}
		k.expect(c, found, "toolkit/list lacks %s", fix.ToolkitName)
	}
	if k.offered["tools"] && len(tools) > 0 {
		m = s.call(ctx, "tool/list/req", map[string]any{"include_deferred": true})
		if k.want(c, m, "tool/list/resp", "tool/list after the configuration") {
			byName := map[string]any{}
			for _, t := range arr(m.body, "tools") {
				byName[str(t, "name")] = t
			}
			for _, n := range tools {
				t, ok := byName[n]
				if k.expect(c, ok, "tool/list lacks %s of the configured toolkit %s", n, fix.ToolkitName) {
					k.expect(c, str(t, "toolkit") == fix.ToolkitName, "tool %s of the configured toolkit names toolkit %q", n, str(t, "toolkit"))
				}
			}
		}
	}
	return nil
}
