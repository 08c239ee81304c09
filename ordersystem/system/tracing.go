package system

import (
	"log/slog"
	"net/http"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/proctrace"
)

// setupTracing makes s.tracer from cfg.TracerProvider (nothing without
// one) and wraps the logger so that lines logged while handling a request
// or a record carry trace_id and span_id.
func (s *System) setupTracing() {
	if s.cfg.TracerProvider == nil {
		return
	}
	s.tracer = proctrace.New(proctrace.TracerProvider(s.cfg.TracerProvider))
	s.cfg.Logger = slog.New(proctrace.LogHandler(s.cfg.Logger.Handler()))
}

// clientTraceHooks are the franz-go hooks tracing a client of group ("" for
// a producer): none without tracing.
func (s *System) clientTraceHooks(group string) []kgo.Opt {
	if s.tracer == nil {
		return nil
	}
	return []kgo.Opt{s.tracer.ClientHooks(group)}
}

// memberTraceOpts are the runtime's tracing options for a member of group.
func (s *System) memberTraceOpts(group string) []processor.TxnOpt {
	if s.tracer == nil {
		return nil
	}
	return []processor.TxnOpt{processor.Tracing(s.tracer), processor.ClientOpts(s.tracer.ClientHooks(group))}
}

// traceHTTP wraps checkout's handler of route (a span "METHOD route" per
// request, after the HTTP semantic conventions, continuing a traceparent
// the client sent): h itself without tracing.
func (s *System) traceHTTP(h http.Handler, route string) http.Handler {
	if s.cfg.TracerProvider == nil {
		return h
	}
	return otelhttp.NewHandler(h, "checkout", otelhttp.WithTracerProvider(s.cfg.TracerProvider),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + route }))
}
