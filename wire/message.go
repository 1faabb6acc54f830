package wire

import "context"

// Message is implemented by every generated message model.
type Message interface {
	// MessageType returns the wire `type` string of the message.
	MessageType() string
	// Validate checks the value constraints of the schema that survive decoding
	// (enums, constants, ranges, lengths, patterns). Presence of required
	// fields is checked by the decoder, which sees the raw line.
	Validate() error
}

// Envelope is the routing part of a message (spec §2.1). Models hold only the
// body; the envelope travels beside them and the encoder splices both into
// one JSON object.
type Envelope struct {
	Type  string
	ID    string
	ReqID string
	// TS is Unix epoch seconds; zero means "now" when encoding.
	TS float64
	// Proto is the protocol version the peer sent (empty when absent).
	Proto string
	// Traceparent is the W3C Trace Context traceparent of an agent's
	// message (schemas/envelope.json): the span of the agent's own trace
	// the host's spans of this message join. Empty when absent or not a
	// string; the host ignores a value it cannot parse.
	Traceparent string
	// Point is the session's point a host's reply carries
	// (schemas/envelope.json, docs/DECISIONS.md, Points): how many
	// state-changing requests the session has answered. HasPoint says the
	// envelope carries it (0 is a point: a new session's).
	Point    uint64
	HasPoint bool
}

// MaxPoint is the largest point the envelope carries: JSON numbers are
// exact integers up to 2^53 − 1 in every SDK's language.
const MaxPoint = 1<<53 - 1

// Packet is one message with its envelope, as it crosses a transport.
type Packet struct {
	Envelope
	Msg Message
	// Size is the encoded size in bytes when known (JSON codec), for audit.
	Size int
}

// EventKind is the `kind` of an event message (spec §2.7, part 6).
type EventKind string

// Event kinds of spec §6.
const (
	EventProgress EventKind = "progress"
	EventStatus   EventKind = "status"
	EventArtifact EventKind = "artifact"
	EventLog      EventKind = "log"
)

// Scope is what the kernel hands a handler for one request: who is asking,
// a way to emit events while the request is in flight, and the kernel's
// internal dispatch for capabilities that drive others (chains, subagents).
type Scope interface {
	// SessionID is the session the request belongs to.
	SessionID() string
	// RequestID is the envelope id of the request being handled.
	RequestID() string
	// Emit sends a `<namespace>/event` for this request. It fails with
	// ErrNotInFlight once the reply has been sent (spec §6 rule 5).
	Emit(kind EventKind, data map[string]any) error
	// Enabled reports whether a capability is enabled for the session.
	Enabled(capability string) bool
	// Dispatch sends req through the kernel as this session would, bypassing
	// the admission queue but counting toward the nesting depth limit
	// (docs/DECISIONS.md, Dispatch). Events of the inner request reach this request.
	Dispatch(ctx context.Context, req Message) (Message, error)
}
