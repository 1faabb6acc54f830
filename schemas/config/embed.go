// Package config embeds the JSON Schemas of a host configuration file
// (schemas/config/*.json): kernel.json for the file's own sections and one
// schema per built-in plugin module for its settings. They are the source
// of the generated Go configuration types and docs/config.md, and what
// `aep config validate` and `aep serve` check a file against
// (internal/configcheck).
package config

import "embed"

// FS holds kernel.json (x-aep-kernel) and one schema file per plugin
// module, named after its capability; each such file's x-aep-module
// keyword names the module (cls) it describes.
//
//go:embed *.json
var FS embed.FS
