package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ordercast/ordercast/ordersystem/system"
)

// TestSetupTracingExportsOTLP: --otlp-endpoint turns tracing on and the
// spans reach an OTLP/HTTP receiver (POST /v1/traces, protobuf) with
// service.name from OTEL_SERVICE_NAME, or the command's default without it;
// without an endpoint (flag or environment) there is no tracing.
func TestSetupTracingExportsOTLP(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	var cfg system.Config
	flush, err := setupTracing(context.Background(), &cfg, "", "ordercast")
	if err != nil || cfg.TracerProvider != nil {
		t.Fatalf("without an endpoint: %v, provider %v; want no tracing", err, cfg.TracerProvider)
	}
	flush()

	var mu sync.Mutex
	got := map[string]string{} // span name -> service.name
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.ResourceSpans {
			svc := ""
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					svc = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					got[s.Name] = svc
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	defer srv.Close()
	for _, c := range []struct{ env, want string }{{"", "ordercast-payments"}, {"billing", "billing"}} {
		t.Setenv("OTEL_SERVICE_NAME", c.env)
		cfg = system.Config{}
		flush, err := setupTracing(context.Background(), &cfg, srv.URL, "ordercast-payments")
		if err != nil || cfg.TracerProvider == nil {
			t.Fatalf("with --otlp-endpoint: %v, provider %v", err, cfg.TracerProvider)
		}
		_, s := cfg.TracerProvider.Tracer("test").Start(context.Background(), "span-"+c.want)
		s.End()
		flush() // the batcher's spans exported before it returns
		mu.Lock()
		if svc, ok := got["span-"+c.want]; !ok || svc != c.want {
			t.Errorf("OTEL_SERVICE_NAME=%q: span received %v with service.name %q; want %q", c.env, ok, svc, c.want)
		}
		mu.Unlock()
	}
}
