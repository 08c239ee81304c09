// Package middleware holds composable wrappers of the processor's handlers:
// each is a func(processor.Handler) processor.Handler (Middleware) or a
// func(processor.BatchHandler) processor.BatchHandler (BatchMiddleware), so
// a service writes its handler once and adds panic recovery, timing and
// logging around it, and Decode turns a record into a typed value before
// the handler sees it:
//
//	h := middleware.Chain(
//		middleware.Decode(middleware.JSON[invoice], handleInvoice),
//		middleware.Recover(),
//		middleware.Log(logger),
//		middleware.Timing(durations),
//	)
//	p, err := processor.New(..., processor.WithHandler(h))
//
// Chain applies the first middleware outermost: above, Recover sees the
// panics of everything inside it. Every wrapper is safe for concurrent use
// when the handler it wraps is; the runtime calls a handler concurrently
// (processor.Concurrency).
package middleware

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordercast/ordercast/processor"
)

// Middleware wraps a Handler.
type Middleware func(processor.Handler) processor.Handler

// BatchMiddleware wraps a BatchHandler.
type BatchMiddleware func(processor.BatchHandler) processor.BatchHandler

// Chain returns h wrapped in ms, the first outermost: Chain(h, a, b) is
// a(b(h)). With no ms it returns h.
func Chain(h processor.Handler, ms ...Middleware) processor.Handler {
	for i := len(ms) - 1; i >= 0; i-- {
		h = ms[i](h)
	}
	return h
}

// ChainBatch is Chain for a BatchHandler.
func ChainBatch(h processor.BatchHandler, ms ...BatchMiddleware) processor.BatchHandler {
	for i := len(ms) - 1; i >= 0; i-- {
		h = ms[i](h)
	}
	return h
}

// panicError is the error of a recovered panic: permanent, with the stack.
func panicError(v any) error {
	return processor.Permanent(&processor.PanicError{Value: v, Stack: debug.Stack()})
}

// Recover turns a panic of the handler into a permanent error wrapping a
// *processor.PanicError with the panic's value and stack: the record goes
// to the DLQ at once (no in-place retry, no retry topic), with the stack in
// its processor.HeaderErrorStack header and "handler panic: <value>" in
// processor.HeaderErrorMessage. Without it the runtime recovers a panic
// itself, as a transient *processor.PanicError that is retried (with the
// same headers once it reaches the DLQ). Use Recover when a panic is a bug
// no retry fixes.
func Recover() Middleware {
	return func(next processor.Handler) processor.Handler {
		return func(ctx context.Context, r *kgo.Record) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = panicError(v)
				}
			}()
			return next(ctx, r)
		}
	}
}

// RecoverBatch is Recover for a BatchHandler: a panic fails the batch with
// a permanent error, and the runtime then handles its records one at a
// time (with the Handler, which needs a Recover of its own).
func RecoverBatch() BatchMiddleware {
	return func(next processor.BatchHandler) processor.BatchHandler {
		return func(ctx context.Context, recs []*kgo.Record) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = panicError(v)
				}
			}()
			return next(ctx, recs)
		}
	}
}

// outcome is the class label of a handler result: "ok" or
// processor.ErrorClass(err).
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return processor.ErrorClass(err)
}

// Timing observes the duration of each handler call, in seconds, in h
// under the labels topic (the record's) and outcome ("ok", or
// processor.ErrorClass of the error: "transient", "permanent", "timeout" or
// the error's own class). h must have exactly those two labels; see
// NewTimingHistogram. The runtime's own handler_duration_seconds has no
// outcome label and counts the whole chain; Timing placed inside Decode
// times the handler alone.
func Timing(h *prometheus.HistogramVec) Middleware {
	return func(next processor.Handler) processor.Handler {
		return func(ctx context.Context, r *kgo.Record) error {
			start := time.Now()
			err := next(ctx, r)
			h.WithLabelValues(r.Topic, outcome(err)).Observe(time.Since(start).Seconds())
			return err
		}
	}
}

// TimingBatch observes the duration of each BatchHandler call, in seconds,
// in h under the labels topic (the first record's; a batch may hold
// several topics) and outcome, as Timing.
func TimingBatch(h *prometheus.HistogramVec) BatchMiddleware {
	return func(next processor.BatchHandler) processor.BatchHandler {
		return func(ctx context.Context, recs []*kgo.Record) error {
			start := time.Now()
			err := next(ctx, recs)
			topic := ""
			if len(recs) > 0 {
				topic = recs[0].Topic
			}
			h.WithLabelValues(topic, outcome(err)).Observe(time.Since(start).Seconds())
			return err
		}
	}
}

// NewTimingHistogram creates the histogram Timing and TimingBatch take,
// named <namespace>_<name> with the labels topic and outcome and buckets
// from 0.5 ms doubling to about 16 s (the runtime's handler_duration_seconds
// buckets), and registers it with reg (prometheus.DefaultRegisterer when
// nil). It returns the registry's error when the name is taken.
func NewTimingHistogram(reg prometheus.Registerer, namespace, name string) (*prometheus.HistogramVec, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name,
		Help:    "Duration of one handler call, by topic and outcome (ok or the error class).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"topic", "outcome"})
	if err := reg.Register(h); err != nil {
		return nil, fmt.Errorf("middleware: timing histogram: %w", err)
	}
	return h, nil
}

// traceAttrs are the trace_id and span_id of the span in ctx, if any.
func traceAttrs(ctx context.Context) []any {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []any{"trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String()}
}

// Log logs each handler call with l: a failed one at WARN ("handler
// failed"), a successful one at DEBUG ("handled"), with the record's topic,
// partition, offset and key, the duration, and for a failure the error
// class and the error; plus trace_id and span_id when ctx carries a valid
// OpenTelemetry span (with processor.Tracing and processor/proctrace, the
// attempt's span). The error is returned unchanged. A nil l logs nothing.
func Log(l *slog.Logger) Middleware {
	return func(next processor.Handler) processor.Handler {
		if l == nil {
			return next
		}
		return func(ctx context.Context, r *kgo.Record) error {
			start := time.Now()
			err := next(ctx, r)
			attrs := append([]any{"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "key", string(r.Key),
				"duration", time.Since(start)}, traceAttrs(ctx)...)
			if err != nil {
				l.WarnContext(ctx, "handler failed", append(attrs, "error_class", processor.ErrorClass(err), "error", err)...)
			} else {
				l.DebugContext(ctx, "handled", attrs...)
			}
			return err
		}
	}
}

// LogBatch is Log for a BatchHandler: one line per call, with the number of
// records and the first record's coordinates.
func LogBatch(l *slog.Logger) BatchMiddleware {
	return func(next processor.BatchHandler) processor.BatchHandler {
		if l == nil {
			return next
		}
		return func(ctx context.Context, recs []*kgo.Record) error {
			start := time.Now()
			err := next(ctx, recs)
			attrs := []any{"records", len(recs), "duration", time.Since(start)}
			if len(recs) > 0 {
				attrs = append(attrs, "topic", recs[0].Topic, "partition", recs[0].Partition, "offset", recs[0].Offset)
			}
			attrs = append(attrs, traceAttrs(ctx)...)
			if err != nil {
				l.WarnContext(ctx, "batch handler failed", append(attrs, "error_class", processor.ErrorClass(err), "error", err)...)
			} else {
				l.DebugContext(ctx, "batch handled", attrs...)
			}
			return err
		}
	}
}

// Decode returns a Handler that decodes each record with decode and calls h
// with the value. A decode error is made permanent (processor.Permanent,
// unless it is permanent already), so an undecodable record goes to the DLQ
// at once, and h is not called; the error names the record's topic,
// partition and offset. JSON is a decode function for JSON values.
func Decode[T any](decode func(ctx context.Context, r *kgo.Record) (T, error), h func(ctx context.Context, r *kgo.Record, v T) error) processor.Handler {
	return func(ctx context.Context, r *kgo.Record) error {
		v, err := decode(ctx, r)
		if err != nil {
			err = fmt.Errorf("decode %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
			if !processor.IsPermanent(err) {
				err = processor.Permanent(err)
			}
			return err
		}
		return h(ctx, r, v)
	}
}

// DecodeBatch is Decode for a BatchHandler: every record of the batch is
// decoded first, and the first failure fails the batch with a permanent
// error (the runtime then handles the records one at a time, where the
// Handler decodes them again and dead-letters the undecodable one alone).
// vs[i] is the value of recs[i].
func DecodeBatch[T any](decode func(ctx context.Context, r *kgo.Record) (T, error), h func(ctx context.Context, recs []*kgo.Record, vs []T) error) processor.BatchHandler {
	return func(ctx context.Context, recs []*kgo.Record) error {
		vs := make([]T, len(recs))
		for i, r := range recs {
			v, err := decode(ctx, r)
			if err != nil {
				return processor.Permanent(fmt.Errorf("decode %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err))
			}
			vs[i] = v
		}
		return h(ctx, recs, vs)
	}
}

// JSON decodes the record's value as one JSON value of type T
// (encoding/json; unknown fields are ignored, as json.Unmarshal does). A
// null or empty value is an error.
func JSON[T any](_ context.Context, r *kgo.Record) (T, error) {
	var v T
	if len(r.Value) == 0 {
		return v, fmt.Errorf("empty value")
	}
	err := json.Unmarshal(r.Value, &v)
	return v, err
}
