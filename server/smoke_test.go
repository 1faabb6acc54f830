package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
)

func TestSmokeBothCodecs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg := server.Defaults()
	cfg.Server.AuthToken = "secret"
	h, err := server.New(ctx, cfg,
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: &echoplug.Plugin{Name: "e1"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	for _, codec := range []client.Codec{client.JSON, client.Direct} {
		c, err := client.InProcess(h, codec, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Handshake(ctx, "agent", "secret", "echo", "nope"); err != nil {
			t.Fatal(err)
		}
		ec := testproto.Client{Requester: c}
		r, err := ec.EchoSay(ctx, &testproto.EchoSayReq{Text: "hi", Mode: "upper"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Text != "HI" || r.By != "e1" {
			t.Fatalf("got %+v", r)
		}
		c.Close()
	}
}
