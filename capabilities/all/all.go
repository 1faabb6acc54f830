// Package all links every built-in capability into a binary: each
// capability package registers its plugin modules at init, and importing
// this package for its side effects (as cmd/aep does) makes them all
// available to configs and to the default configuration of `aep serve`
// (docs/DECISIONS.md, Names and layout: capabilities/all imports them all).
//
// A new capability adds one blank import here and nothing else.
package all

import (
	_ "github.com/aephost/aep/capabilities/chains"
	_ "github.com/aephost/aep/capabilities/env"
	_ "github.com/aephost/aep/capabilities/learn"
	_ "github.com/aephost/aep/capabilities/mcp"
	_ "github.com/aephost/aep/capabilities/memory"
	_ "github.com/aephost/aep/capabilities/proc"
	_ "github.com/aephost/aep/capabilities/skills"
	_ "github.com/aephost/aep/capabilities/subagents"
	_ "github.com/aephost/aep/capabilities/toolkits"
	_ "github.com/aephost/aep/capabilities/tools"
)
