package main

import "github.com/aephost/aep/server/httpapi"

// The HTTP+SSE transport (docs/DECISIONS.md, Transports); serve uses it unless --stdio.
func init() {
	serveHTTP = httpapi.Serve
	serveOperator = httpapi.ServeOperator
}
