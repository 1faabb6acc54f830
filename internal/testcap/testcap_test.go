package testcap_test

import (
	"testing"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/testcap"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// configYAML configures the test capability the way a user's file would:
// by module ID and capability, with one setting of the plugin's own.
const configYAML = `
server:
  auth_token: ` + aeptest.Token + `
plugins:
  - name: testcap.builtin
    type: testcap
    cls: ` + testcap.ModuleID + `
    config:
      max_keys: 2
`

// newHost starts a host from configYAML, as `aep serve --config` does: the
// kernel's own registry (gen/msg, which has no testcap namespace) and the
// module found by its cls. Nothing tells the host about the namespace but
// the module itself.
func newHost(t *testing.T) *server.Host {
	t.Helper()
	cfg, err := server.ParseConfig([]byte(configYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := server.CheckConfig(cfg, msg.Registry()); err != nil {
		t.Fatalf("CheckConfig (aep config validate): %v", err)
	}
	return aeptest.NewHost(t, cfg, nil)
}

// connect handshakes an agent over the in-process JSON transport (every
// line through the real encoder and decoder) asking for caps; the client
// decodes replies with the host's registry, which holds the namespace the
// module brought.
func connect(t *testing.T, h *server.Host, caps ...string) (*client.Client, testcap.Client) {
	t.Helper()
	c := aeptest.Connect(t, h, caps...)
	return c, testcap.Client{Requester: c}
}

// TestRequestReachesHandler: with the capability granted, each request
// type goes from the agent's line through the kernel to the plugin's
// handler and its reply comes back, per session.
func TestRequestReachesHandler(t *testing.T) {
	h := newHost(t)
	ctx := aeptest.Context(t)
	_, a := connect(t, h, "testcap")

	add, err := a.TestcapAdd(ctx, &testcap.TestcapAddReq{Key: "k", By: 3})
	if err != nil {
		t.Fatal(err)
	}
	if add.Key != "k" || add.Total != 3 || add.UpdatedAt <= 0 {
		t.Fatalf("add: %+v", add)
	}
	// By left out takes its schema default, 1.
	add, err = a.TestcapAdd(ctx, &testcap.TestcapAddReq{Key: "k"})
	if err != nil || add.Total != 4 {
		t.Fatalf("add with default by: %+v %v", add, err)
	}
	get, err := a.TestcapGet(ctx, &testcap.TestcapGetReq{Key: "k"})
	if err != nil || get.Total != 4 || get.UpdatedAt != add.UpdatedAt {
		t.Fatalf("get: %+v %v (after add %+v)", get, err, add)
	}

	// Another session has its own counters (the kernel's SessionState).
	_, b := connect(t, h, "testcap")
	_, err = b.TestcapGet(ctx, &testcap.TestcapGetReq{Key: "k"})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
}

// TestErrors: the generated validator refuses a request that breaks the
// schema before the handler runs; the handler's sentinel errors reach the
// agent with their codes and reasons.
func TestErrors(t *testing.T) {
	h := newHost(t)
	ctx := aeptest.Context(t)
	_, a := connect(t, h, "testcap")
	for _, k := range []string{"a", "b"} {
		if _, err := a.TestcapAdd(ctx, &testcap.TestcapAddReq{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		req    wire.Message
		code   wire.Code
		sub    string
		reason string
	}{
		{"schema: empty key", &testcap.TestcapGetReq{Key: ""}, wire.CodeSchemaViolation, `"key"`, ""},
		{"schema: by below minimum", &testcap.TestcapAddReq{Key: "a", By: -1}, wire.CodeSchemaViolation, `"by"`, ""},
		{"ErrNotFound", &testcap.TestcapGetReq{Key: "absent"}, wire.CodeRuntimeError, `counter "absent"`, "not_found"},
		{"ErrDenied", &testcap.TestcapAddReq{Key: "c"}, wire.CodeRuntimeError, "2 counters", "denied"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Requester.Request(ctx, tc.req)
			we := aeptest.WantError(t, err, tc.code, tc.sub)
			if tc.reason != "" {
				aeptest.WantReason(t, we, tc.code, tc.reason)
			}
		})
	}
}

// TestCapabilityGating: the namespace answers only sessions that asked for
// its capability (spec §7 condition 3), and a host reports the capability
// enabled only when a plugin serves it (spec §2.2).
func TestCapabilityGating(t *testing.T) {
	ctx := aeptest.Context(t)
	t.Run("served and granted", func(t *testing.T) {
		h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{aeptest.Plugin("testcap", new(testcap.Plugin))})
		cl, err := client.InProcess(h, client.JSON, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		resp, err := cl.Handshake(ctx, "agent", aeptest.Token, "testcap")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.AcceptedCaps) != 1 || resp.AcceptedCaps[0] != (msg.CapabilityEntry{Name: "testcap", Enabled: true}) {
			t.Fatalf("accepted_caps %+v", resp.AcceptedCaps)
		}
		if _, err := (testcap.Client{Requester: cl}).TestcapAdd(ctx, &testcap.TestcapAddReq{Key: "k"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("served, not requested", func(t *testing.T) {
		h := newHost(t)
		_, a := connect(t, h, "tools")
		_, err := a.TestcapAdd(ctx, &testcap.TestcapAddReq{Key: "k"})
		aeptest.WantError(t, err, wire.CodeCapabilityMissing, "testcap")
	})
	t.Run("not served", func(t *testing.T) {
		// A host without the plugin neither enables the capability nor
		// knows its namespace: the module brings it only when loaded.
		h := aeptest.NewHost(t, aeptest.Config(nil), nil)
		// The agent knows the namespace (it has the package); the host does not.
		cl, err := client.InProcess(h, client.JSON, msg.Registry().Union(testcap.Registry()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		resp, err := cl.Handshake(ctx, "agent", aeptest.Token, "testcap")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.AcceptedCaps) != 1 || resp.AcceptedCaps[0].Enabled {
			t.Fatalf("accepted_caps %+v, want testcap not enabled", resp.AcceptedCaps)
		}
		if h.Registry().Namespace("testcap") != nil {
			t.Fatal("a host without the module knows the testcap namespace")
		}
		_, err = (testcap.Client{Requester: cl}).TestcapAdd(ctx, &testcap.TestcapAddReq{Key: "k"})
		aeptest.WantError(t, err, wire.CodeParseError, `unknown type "testcap/add/req"`)
	})
}
