package client

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traceparent formats sc as a W3C Trace Context traceparent (version 00),
// the envelope's traceparent field (schemas/envelope.json). A request
// made with a context that carries a span (OpenTelemetry's, or one
// [WithTraceparent] set) gets it, so the host's spans of the request join
// the caller's trace.
func Traceparent(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = appendHex(b, tid[:])
	b = append(b, '-')
	b = appendHex(b, sid[:])
	b = append(b, '-')
	return string(appendHex(b, []byte{byte(sc.TraceFlags())}))
}

func appendHex(dst, src []byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range src {
		dst = append(dst, digits[c>>4], digits[c&0x0f])
	}
	return dst
}

// WithTraceparent returns ctx carrying the span a W3C traceparent names,
// for callers that have a traceparent but no OpenTelemetry span: requests
// made with the context carry it. An unparsable traceparent leaves ctx as
// it is (OpenTelemetry's W3C Trace Context propagator reads it).
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent}))
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
