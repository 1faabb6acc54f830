package chains_test

import (
	"testing"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/tidwall/gjson"
)

// TestToolsAndMemory runs one chain across two capabilities that never
// import each other or chains (spec §1 dispatch rule 5): it opens a memory
// while a built-in tool writes a file, reads the file back with another
// tool, stores its content in semantic memory and retrieves it. The
// memory written by the chain is then read by the agent directly.
func TestToolsAndMemory(t *testing.T) {
	e := newEnv(t, envOpts{
		store: true,
		extra: []server.PluginSpec{{Name: "memory", Type: "memory", Impl: &memory.Plugin{}}},
		caps:  []string{"chains", "tools", "memory"},
	})
	r, evs := e.mustRun(t, `{"input":{"file":"notes/today.txt","text":"buy milk"},"chain":{"nodes":[
		{"id":"init","kind":"action","request":{"type":"memory/init/req","body":{"namespace":"chain-test"}}},
		{"id":"write","kind":"action","request":{"type":"tool/call/req","body":{"tool_name":"write_file","arguments":{"path":"{{input.file}}","content":"{{input.text}}"}}}},
		{"id":"read","kind":"action","request":{"type":"tool/call/req","body":{"tool_name":"read_file","arguments":{"path":"{{nodes.write.output.result.data.path}}"}}}},
		{"id":"store","kind":"action","request":{"type":"memory/store/req","body":{"memory_id":"{{nodes.init.output.memory_id}}",
			"entries":[{"key":"{{input.file}}","content":"{{nodes.read.output.result.data.content}}","tier":"semantic","tags":["chain"]}]}}},
		{"id":"recall","kind":"action","request":{"type":"memory/retrieve/req","body":{"memory_id":"{{nodes.init.output.memory_id}}","keys":["{{input.file}}"]}}}],
		"edges":[{"from":"write","to":"read"},{"from":"init","to":"store"},{"from":"read","to":"store"},{"from":"store","to":"recall"}]}}`)
	if !r.Success {
		t.Fatalf("reply %s", encode(t, r))
	}
	// The edges' order, and only it: init and write are independent.
	at := map[string]int{}
	for i, id := range r.Ran {
		at[id] = i
	}
	for _, e := range [][2]string{{"write", "read"}, {"init", "store"}, {"read", "store"}, {"store", "recall"}} {
		if a, ok := at[e[0]]; !ok || a > at[e[1]] {
			t.Errorf("ran %q: %s must come before %s", joined(r.Ran), e[0], e[1])
		}
	}
	if len(r.Ran) != 5 {
		t.Errorf("ran %q, want all 5 nodes", joined(r.Ran))
	}
	fin := string(r.FinalOutput)
	if c := gjson.Get(fin, "entries.0.content").String(); c != "buy milk" {
		t.Errorf("retrieved %s", fin)
	}
	if got := len(chainEvents(evs)); got != 10 {
		t.Errorf("%d chain events, want start and end of 5 nodes", got)
	}
	// The agent sees what the chain stored.
	id := gjson.Get(string(r.Outputs["init"]), "memory_id").String()
	resp, err := e.c.MemoryRetrieve(aeptest.Context(t), &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{"notes/today.txt"}})
	if err != nil || len(resp.Entries) != 1 || len(resp.Missing) != 0 {
		t.Fatalf("retrieve: %+v %v", resp, err)
	}
	if c := string(resp.Entries[0].Content); c != `"buy milk"` {
		t.Errorf("entry %+v", resp.Entries[0])
	}
}
