package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ordercast/ordercast/ordersystem/system"
)

// tracingOn reports whether tracing is asked for: --otlp-endpoint, or the
// OpenTelemetry environment's OTLP endpoint
// (https://opentelemetry.io/docs/specs/otel/protocol/exporter/).
func tracingOn(endpoint string) bool {
	return endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// setupTracing sets cfg.TracerProvider to an OTLP/HTTP exporter's when
// tracing is on (tracingOn), and returns the function that flushes and
// stops it (a no-op otherwise). The exporter reads the standard
// environment (OTEL_EXPORTER_OTLP_*: endpoint, headers, TLS, timeout);
// endpoint, a base URL such as http://127.0.0.1:4318 (as
// OTEL_EXPORTER_OTLP_ENDPOINT: spans go to its /v1/traces), overrides it.
// The resource is the environment's (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) with service.name defaulting to name; the
// sampler is OTEL_TRACES_SAMPLER's (default parentbased_always_on).
func setupTracing(ctx context.Context, cfg *system.Config, endpoint, name string) (func(), error) {
	if !tracingOn(endpoint) {
		return func() {}, nil
	}
	var opts []otlptracehttp.Option
	if endpoint != "" {
		// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT: the traces path is
		// appended to it (the exporter takes a URL's path as it is).
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(endpoint, "/")+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", name)), resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	cfg.TracerProvider = tp
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			fmt.Fprintf(os.Stderr, "ordercast: tracing: flushing spans: %v\n", err)
		}
	}, nil
}
