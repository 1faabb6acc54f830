// Package sdkform turns the contract bundle (gen/contract/aep.schema.json)
// into the form the SDK generators (tools/pygen, tools/tsgen) read: the
// bundle is written for validators and stock generators, and two of its
// rules say nothing an SDK's types need.
//
//   - A message union that dispatches on `type` (an allOf of if/then, one
//     per member, so that a validator reports the failing member alone)
//     becomes the oneOf of its members: a discriminated union.
//   - The agent's open copy of a def both sides send (`<Name>Input`, the
//     same fields as the closed `<Name>`) is `<Name>` again: an SDK keeps
//     unknown fields of what it reads, so the two are one type to it.
//   - AnyAgentMessage and AnyHostMessage, the oneOf unions the bundle
//     keeps for stock generators, repeat AgentMessage and HostMessage
//     once these are unions: they are left out.
package sdkform

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// inputSuffix is tools/aepcontract's name suffix of an agent's copy.
const inputSuffix = "Input"

// ForSDK returns the bundle in the SDK generators' form.
func ForSDK(bundle []byte) ([]byte, error) {
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(bundle))
	dec.UseNumber() // bounds such as 9007199254740991 stay as written
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("parse bundle: %w", err)
	}
	defs, _ := root["$defs"].(map[string]any)
	if defs == nil {
		return nil, fmt.Errorf("the bundle has no $defs")
	}
	names := make([]string, 0, len(defs))
	for n := range defs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if members, ok := dispatchMembers(defs[n]); ok {
			d := defs[n].(map[string]any)
			one := make([]any, len(members))
			for i, m := range members {
				one[i] = map[string]any{"$ref": "#/$defs/" + m}
			}
			defs[n] = map[string]any{"description": d["description"], "oneOf": one}
		}
	}
	delete(defs, "AnyAgentMessage")
	delete(defs, "AnyHostMessage")
	twins := map[string]string{}
	for _, n := range names {
		base, ok := strings.CutSuffix(n, inputSuffix)
		if !ok || defs[base] == nil {
			continue
		}
		twins[n] = base
	}
	for in, base := range twins {
		a, b := open(retarget(defs[in], twins)), open(defs[base])
		delete(a.(map[string]any), "description")
		delete(b.(map[string]any), "description")
		if !reflect.DeepEqual(a, b) {
			return nil, fmt.Errorf("%s is not %s with other fields allowed", in, base)
		}
		delete(defs, in)
	}
	for n, d := range defs {
		defs[n] = retarget(d, twins)
	}
	return json.Marshal(root)
}

// dispatchMembers returns the members of a union in dispatch form: an
// object whose `type` is an enum and whose allOf holds only
// {if: {type: const}, then: {$ref}} rules, one per enum value.
func dispatchMembers(v any) ([]string, bool) {
	d, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	rules, ok := d["allOf"].([]any)
	props, _ := d["properties"].(map[string]any)
	typ, _ := props["type"].(map[string]any)
	enum, _ := typ["enum"].([]any)
	if !ok || len(rules) == 0 || len(enum) != len(rules) || len(props) != 1 {
		return nil, false
	}
	var out []string
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		then, _ := rule["then"].(map[string]any)
		ref, _ := then["$ref"].(string)
		name, ok := strings.CutPrefix(ref, "#/$defs/")
		if !ok || rule["if"] == nil || len(rule) != 2 || len(then) != 1 {
			return nil, false
		}
		out = append(out, name)
	}
	return out, true
}

// retarget copies v with $refs to a twin pointed at its base.
func retarget(v any, twins map[string]string) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = retarget(x, twins)
		}
		if ref, ok := v["$ref"].(string); ok {
			if base, ok := twins[strings.TrimPrefix(ref, "#/$defs/")]; ok {
				out["$ref"] = "#/$defs/" + base
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = retarget(x, twins)
		}
		return out
	default:
		return v
	}
}

// open copies v without additionalProperties: false at any depth.
func open(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if k == "additionalProperties" && x == false {
				continue
			}
			out[k] = open(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = open(x)
		}
		return out
	default:
		return v
	}
}
