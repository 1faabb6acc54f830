package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/aephost/aep/internal/version"
)

// newInstanceID returns this process's service.instance.id: a random
// UUID (version 4), new at every start, as OpenTelemetry's semantic
// conventions recommend — a restarted host is a new instance, whatever
// its host id.
func newInstanceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// traceResource describes this host in every span it exports, so that the
// hosts of a fleet can be told apart (docs/operating.md, Traces):
// service.name aep, service.version (internal/version), service.instance.id
// (this process), aep.host_id (server.host_id, the name a proxy routes
// by) and host.name.
func traceResource(hostID, instanceID string) *resource.Resource {
	attrs := []attribute.KeyValue{
		semconv.ServiceName("aep"),
		semconv.ServiceVersion(version.Get().Version),
		semconv.ServiceInstanceID(instanceID),
		attribute.String("aep.host_id", hostID),
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		attrs = append(attrs, semconv.HostName(name))
	}
	return resource.NewSchemaless(attrs...)
}

// newTracerProvider exports spans over OTLP/HTTP to endpoint: host:port
// (plain HTTP, as a local collector listens) or an http(s) URL.
func newTracerProvider(ctx context.Context, endpoint string, res *resource.Resource) (*sdktrace.TracerProvider, error) {
	var opt otlptracehttp.Option
	if strings.Contains(endpoint, "://") {
		// A collector's base URL, as operators write it, gets the OTLP/HTTP
		// path of traces; a URL with a path of its own is used as it is.
		if u, err := url.Parse(endpoint); err == nil && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
			endpoint = u.String()
		}
		opt = otlptracehttp.WithEndpointURL(endpoint)
	} else {
		opt = otlptracehttp.WithEndpoint(endpoint)
	}
	opts := []otlptracehttp.Option{opt}
	if !strings.HasPrefix(endpoint, "https://") {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("operator.otlp_endpoint: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
