// Package wire is the vocabulary shared by the generated message code, the
// kernel and the client: the message envelope, the line scanner that enforces
// the framing rules, the encoder, protocol errors and their codes, the type
// registry entries, and the Scope a handler receives for one request.
//
// It imports nothing else of the project, so both gen/ and server/ can import it.
package wire
