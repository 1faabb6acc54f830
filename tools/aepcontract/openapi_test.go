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
	send := doc.Paths.Value("/send").Post.RequestBody.Value.Content.Get("text/plain").Schema.Value
	if send.ContentSchema == nil || send.ContentSchema.Ref != "gen/contract/aep.schema.json#/$defs/AgentMessage" ||
		send.ContentSchema.Value == nil || len(send.ContentSchema.Value.OneOf) == 0 {
		t.Fatalf("/send body: contentSchema %+v", send.ContentSchema)
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
