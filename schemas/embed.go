// Package schemas embeds the protocol's JSON Schema files (schemas/*.json),
// the source of truth for every message shape, so the aep binary can print
// them (`aep schema`) without the source tree.
package schemas

import "embed"

// FS holds every schema file of this directory, named <namespace>.json.
//
//go:embed *.json
var FS embed.FS
