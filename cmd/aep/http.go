package main

import "github.com/aephost/aep/server/httpapi"

// The HTTP+SSE transport (DESIGN Transports); serve uses it unless --stdio.
func init() { serveHTTP = httpapi.Serve }
