// Package config embeds the JSON Schemas of the built-in plugins' settings
// (schemas/config/*.json): the source of the generated Go settings types
// and docs/config.md, and what `aep config validate` checks each plugin's
// `config` against.
package config

import "embed"

// FS holds one schema file per plugin module, named after its capability;
// each file's x-aep-module keyword names the module (cls) it describes.
//
//go:embed *.json
var FS embed.FS
