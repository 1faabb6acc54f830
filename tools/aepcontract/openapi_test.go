package main

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPI: openapi.yaml is a valid OpenAPI document (kin-openapi), and
// /send and /stream name the contract's unions, which resolve into the
// bundle.
func TestOpenAPI(t *testing.T) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true // only the bundle beside it, a file
	doc, err := loader.LoadFromFile("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	post := doc.Paths.Value("/send").Post
	send := post.RequestBody.Value.Content.Get("text/plain").Schema.Value
	if send.ContentSchema == nil || send.ContentSchema.Ref != "gen/contract/aep.schema.json#/$defs/AgentMessage" ||
		send.ContentSchema.Value == nil || len(send.ContentSchema.Value.AllOf) == 0 {
		t.Fatalf("/send body: contentSchema %+v", send.ContentSchema)
	}
	// Typed for generated clients: the JSON body is any agent message,
	// the single exchange's reply any host message, each a oneOf of the
	// bundle's messages.
	for _, c := range []struct {
		what, union string
		media       *openapi3.MediaType
	}{
		{"/send application/json body", "AnyAgentMessage", post.RequestBody.Value.Content.Get("application/json")},
		{"/send 200 application/json", "AnyHostMessage", post.Responses.Value("200").Value.Content.Get("application/json")},
	} {
		if c.media == nil || c.media.Schema == nil || c.media.Schema.Value == nil || len(c.media.Schema.Value.AllOf) != 1 {
			t.Fatalf("%s: %+v", c.what, c.media)
		}
		ref := c.media.Schema.Value.AllOf[0]
		if ref.Ref != "gen/contract/aep.schema.json#/$defs/"+c.union || ref.Value == nil || len(ref.Value.OneOf) == 0 {
			t.Fatalf("%s: %s, want the bundle's %s", c.what, ref.Ref, c.union)
		}
	}
	stream := doc.Paths.Value("/stream").Get.Responses.Value("200").Value.Content.Get("text/event-stream; charset=utf-8")
	if stream == nil {
		t.Fatal("/stream: no text/event-stream; charset=utf-8 response")
	}
	item, _ := stream.Extensions["x-itemSchema"].(map[string]any)
	cs, _ := item["contentSchema"].(map[string]any)
	if cs["$ref"] != "gen/contract/aep.schema.json#/$defs/HostMessage" {
		t.Fatalf("/stream: x-itemSchema %v", stream.Extensions)
	}
}
