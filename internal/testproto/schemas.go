package testproto

import (
	"embed"
	"io/fs"
)

//go:embed schemas/*.json
var schemaFiles embed.FS

// Schemas returns the echo namespace's schema files, named <namespace>.json
// at the root, for conformance checkers of test hosts.
func Schemas() fs.FS {
	sub, err := fs.Sub(schemaFiles, "schemas")
	if err != nil {
		panic(err) // the embedded directory exists: a build-time fact
	}
	return sub
}
