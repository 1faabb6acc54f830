package main

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// transport is one way to reach a host. The AsyncAPI document gets, per
// transport, a server, a channel for what the agent sends, one for what the
// host sends, and an operation per request: adding a transport is one entry
// here (docs/contract.md).
type transport struct {
	ID          string // the server's key; channels and operations derive from it
	Host        string
	Protocol    string
	Description string
	In, Out     channelDef
}

type channelDef struct {
	Address     string // "" for a channel without an address (stdin, stdout)
	Description string
}

var transports = []transport{
	{
		ID: "stdio", Host: "localhost", Protocol: "stdio",
		Description: "`aep serve --stdio`: one session, one compact JSON object per line (NDJSON) on the host's stdin and stdout; logs on stderr only.",
		In:          channelDef{Description: "Lines the agent writes to the host's standard input."},
		Out:         channelDef{Description: "Lines the host writes to its standard output."},
	},
	{
		ID: "http", Host: "127.0.0.1:8080", Protocol: "http",
		Description: "`aep serve`: `POST /session` creates a session; its id goes in the `X-Session-Id` header of `/send` and `/stream` (openapi.yaml).",
		In:          channelDef{Address: "/send", Description: "`POST /send`: one message as the request body."},
		Out:         channelDef{Address: "/stream", Description: "`GET /stream`: server-sent events, one message per event's data."},
	},
	{
		ID: "websocket", Host: "127.0.0.1:8080", Protocol: "ws",
		Description: "`GET /ws` upgrades to a WebSocket: one session per connection, created on connect; a host-created session is attached by the `X-Session-Id` request header or a first frame, never the URL (openapi.yaml, docs/transports.md).",
		In:          channelDef{Address: "/ws", Description: "Text frames the agent sends: one message per frame."},
		Out:         channelDef{Address: "/ws", Description: "Text frames the host sends: one message per frame."},
	},
}

// kv and om make an ordered YAML mapping, so the document reads top-down.
type kv struct {
	K string
	V any
}
type om []kv

func node(v any) *yaml.Node {
	switch v := v.(type) {
	case om:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, e := range v {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: e.K}, node(e.V))
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, x := range v {
			n.Content = append(n.Content, node(x))
		}
		return n
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(v)}
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	panic(fmt.Sprintf("aepcontract: no YAML for %T", v))
}

func ref(p string) om { return om{{"$ref", p}} }

// The tag of the operations whose requests change the session's state
// (x-aep-changes-state): a standard AsyncAPI operation tag, so the SDK
// generators (tools/tsgen, tools/pygen) and stock tools read it without
// any keyword of ours.
const (
	changesStateTag  = "changes-state"
	changesStateText = "A successful reply takes the session's next point (the reply envelope's point): a client counts it as acknowledged work a restore must cover (docs/DECISIONS.md, Points)."
)

// operationName is an operation's key: "tool/call/req" over stdio →
// "stdioToolCallReq".
func operationName(tr transport, t string) string { return tr.ID + pascal(t) }

func (c *contract) asyncAPI(bundleFile string) ([]byte, error) {
	messages := om{}
	for _, m := range c.messages {
		loc := "$message.payload#/req_id"
		if agentSends(m.Kind) {
			loc = "$message.payload#/id"
		}
		summary := fmt.Sprintf("%s (%s)", m.Type, m.Kind)
		if m.AliasOf != "" {
			summary += ", an alias of " + m.AliasOf
		}
		messages = append(messages, kv{m.Def, om{
			{"name", m.Type},
			{"title", m.Def},
			{"summary", summary},
			{"contentType", "application/json"},
			{"correlationId", om{
				{"description", map[bool]string{true: "A request's id; its reply and events carry it as req_id.", false: "The id of the request answered."}[agentSends(m.Kind)]},
				{"location", loc},
			}},
			{"payload", ref(bundleFile + "#/$defs/" + m.Def)},
		}})
	}
	servers := om{}
	channels := om{}
	var ops om
	for _, tr := range transports {
		servers = append(servers, kv{tr.ID, om{{"host", tr.Host}, {"protocol", tr.Protocol}, {"description", tr.Description}}})
		for _, dir := range []struct {
			suffix string
			def    channelDef
			agent  bool
		}{{"In", tr.In, true}, {"Out", tr.Out, false}} {
			msgs := om{}
			for _, m := range c.messages {
				if agentSends(m.Kind) == dir.agent {
					msgs = append(msgs, kv{m.Def, ref("#/components/messages/" + m.Def)})
				}
			}
			var addr any
			if dir.def.Address != "" {
				addr = dir.def.Address
			}
			channels = append(channels, kv{tr.ID + dir.suffix, om{
				{"address", addr},
				{"description", dir.def.Description},
				{"servers", []any{ref("#/servers/" + tr.ID)}},
				{"messages", msgs},
			}})
		}
		in, out := "#/channels/"+tr.ID+"In", "#/channels/"+tr.ID+"Out"
		for _, m := range c.messages {
			switch m.Kind {
			case kindRequest:
				replies := []any{ref(out + "/messages/" + c.byType[m.Reply].Def)}
				if m.Reply != "error" {
					replies = append(replies, ref(out+"/messages/"+c.byType["error"].Def))
				}
				op := om{
					{"action", "receive"},
					{"channel", ref(in)},
					{"summary", fmt.Sprintf("The host receives %s and answers %s (or error), exactly once.", m.Type, m.Reply)},
				}
				if m.ChangesState {
					op = append(op, kv{"tags", []any{om{{"name", changesStateTag}, {"description", changesStateText}}}})
				}
				op = append(op, kv{"messages", []any{ref(in + "/messages/" + m.Def)}},
					kv{"reply", om{{"channel", ref(out)}, {"messages", replies}}})
				ops = append(ops, kv{operationName(tr, m.Type), op})
			case kindNotification:
				ops = append(ops, kv{operationName(tr, m.Type), om{
					{"action", "receive"},
					{"channel", ref(in)},
					{"summary", fmt.Sprintf("The host receives %s; a notification gets no reply.", m.Type)},
					{"messages", []any{ref(in + "/messages/" + m.Def)}},
				}})
			case kindEvent:
				ops = append(ops, kv{operationName(tr, m.Type), om{
					{"action", "send"},
					{"channel", ref(out)},
					{"summary", fmt.Sprintf("The host sends %s while a %s request is in flight, before its reply; seq 0, 1, 2 … per request (spec §6).", m.Type, m.Namespace)},
					{"messages", []any{ref(out + "/messages/" + m.Def)}},
				}})
			}
		}
	}
	doc := om{
		{"asyncapi", "3.0.0"},
		{"info", om{
			{"title", "Agent-Environment Protocol"},
			{"version", "1.0"},
			{"description", strings.Join([]string{
				"The aep host's side of the Agent-Environment Protocol 1.0. Generated by tools/aepcontract from schemas/; do not edit.",
				"Every payload is a whole message of " + bundleFile + " (JSON Schema 2020-12).",
				"The host receives requests and answers each with exactly one reply (or error) carrying the request's id as req_id; events of a request come before its reply.",
			}, " ")},
		}},
		{"defaultContentType", "application/json"},
		{"servers", servers},
		{"channels", channels},
		{"operations", ops},
		{"components", om{{"messages", messages}}},
	}
	var b strings.Builder
	b.WriteString("# Code generated by aepcontract. DO NOT EDIT.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(node(doc)); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}
