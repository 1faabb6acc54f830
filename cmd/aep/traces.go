package main

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// newTracerProvider exports spans over OTLP/HTTP to endpoint: host:port
// (plain HTTP, as a local collector listens) or an http(s) URL.
func newTracerProvider(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	var opt otlptracehttp.Option
	if strings.Contains(endpoint, "://") {
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
	res := resource.NewSchemaless(semconv.ServiceName("aep"))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
