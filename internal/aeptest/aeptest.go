// Package aeptest is the test harness every package's tests share: a host
// with chosen plugins, an agent connected to it in process, and assertions
// on protocol errors. Tests use real parts through it (the kernel, its
// decoder, real plugin instances); nothing here fakes a capability.
package aeptest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Token is the auth token of hosts made by [NewHost].
const Token = "aeptest-token"

// Config returns the default configuration with [Token] as auth token;
// edit, when non-nil, changes it further.
func Config(edit func(*server.Config)) server.Config {
	cfg := server.Defaults()
	cfg.Server.AuthToken = Token
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// Plugin returns the spec of a plugin named after its type.
func Plugin(typ string, impl server.Plugin) server.PluginSpec {
	return server.PluginSpec{Name: typ, Type: typ, Impl: impl}
}

// NewHost starts a host with cfg, the plugins and any further options, and
// closes it when the test ends.
func NewHost(tb testing.TB, cfg server.Config, plugins []server.PluginSpec, opts ...server.Option) *server.Host {
	tb.Helper()
	for _, p := range plugins {
		opts = append(opts, server.WithPlugin(p))
	}
	h, err := server.New(context.Background(), cfg, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// Connect handshakes an agent with h in process with [client.JSON] (the
// real decoder) and the given capabilities, and closes it when the test
// ends. reg is the registry of extra namespaces, or nil.
func Connect(tb testing.TB, h *server.Host, caps ...string) *client.Client {
	tb.Helper()
	return ConnectWith(tb, h, client.JSON, nil, caps...)
}

// ConnectWith is [Connect] with a codec and a registry of extra namespaces.
func ConnectWith(tb testing.TB, h *server.Host, codec client.Codec, reg *wire.Registry, caps ...string) *client.Client {
	tb.Helper()
	c, err := client.InProcess(h, codec, reg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if _, err := c.Handshake(Context(tb), "aeptest-agent", Token, caps...); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Context returns a context that ends with the test, or after 30 s.
func Context(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// WantError fails the test unless err is a protocol error with code whose
// message contains sub ("" matches any), and returns it.
func WantError(tb testing.TB, err error, code wire.Code, sub string) *wire.Error {
	tb.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		tb.Fatalf("want a %s error containing %q, got %v", code, sub, err)
	}
	if we.Code != code || !strings.Contains(we.Message, sub) {
		tb.Fatalf("want a %s error containing %q, got %s: %s", code, sub, we.Code, we.Message)
	}
	return we
}

// WantReason is [WantError] that also checks detail.reason.
func WantReason(tb testing.TB, err error, code wire.Code, reason string) *wire.Error {
	tb.Helper()
	we := WantError(tb, err, code, "")
	d, _ := we.Detail.(map[string]any)
	if got, _ := d["reason"].(string); got != reason {
		tb.Fatalf("want detail.reason %q, got %v (%s)", reason, we.Detail, we.Message)
	}
	return we
}

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }

// Handle returns the public handle of c's session, as session/info
// reports it: the id plugins key their state by, name directories after,
// and audit lines carry (server/handle.go), where c.SessionID() is the
// transport id.
func Handle(tb testing.TB, c *client.Client) string {
	tb.Helper()
	info, err := c.SessionInfo(Context(tb), &msg.SessionInfoReq{})
	if err != nil {
		tb.Fatalf("session/info: %v", err)
	}
	return info.Handle
}
