// Package proctrace traces the runtime with OpenTelemetry, following the
// messaging semantic conventions v1.44.0 for Kafka: a "send <topic>" span
// (PRODUCER) per record produced, with its W3C trace context
// (traceparent, tracestate) in the record's headers; a "poll <topic>" span
// (CLIENT) per fetched batch; a "process <topic>" span (CONSUMER) per
// handler attempt, child of and linked to the record's send span, with the
// attempt number; a "send <retry topic or DLQ>" span with a retry-topic-hop
// or dead-letter event per forward, the forwarded record keeping the trace;
// and a "commit <topic>" span (CLIENT) per offset commit, an event per
// partition.
//
// A processor user who wants no tracing does not import this package: the
// processor calls its processor.Tracer only when given one with
// processor.Tracing. Wire it in with both:
//
//	tr := proctrace.New(proctrace.TracerProvider(tp))
//	p, err := processor.New(..., processor.Tracing(tr), processor.ClientOpts(tr.ClientHooks(group)))
//
// Attribute names come from the project's one list of them (the
// conventions, and OTEL_SEMCONV_STABILITY_OPT_IN=messaging/dup for the
// earlier experimental names as well). A Tracer is safe for concurrent use.
package proctrace

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordercast/ordercast/internal/semconv"
	"github.com/ordercast/ordercast/processor"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/ordercast/ordercast/processor/proctrace"

// Tracer traces the runtime (processor.Tracer) and, through ClientHooks,
// the records a franz-go client produces and fetches.
type Tracer struct {
	tr   trace.Tracer
	prop propagation.TextMapPropagator
	conv semconv.Conv
}

// Opt configures New.
type Opt func(*config)

type config struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// TracerProvider sets the provider of the spans; default otel's global one
// (otel.GetTracerProvider).
func TracerProvider(tp trace.TracerProvider) Opt { return func(c *config) { c.tp = tp } }

// Propagator sets how trace context is written to and read from record
// headers; default W3C Trace Context and Baggage
// (https://www.w3.org/TR/trace-context/).
func Propagator(p propagation.TextMapPropagator) Opt { return func(c *config) { c.prop = p } }

// New returns a Tracer. It reads OTEL_SEMCONV_STABILITY_OPT_IN once.
func New(opts ...Opt) *Tracer {
	c := config{prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return &Tracer{
		tr:   c.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop: c.prop,
		conv: semconv.FromEnv(),
	}
}

var (
	_ processor.Tracer              = (*Tracer)(nil)
	_ processor.RecordOutputsTracer = (*Tracer)(nil)
)

// Headers is a propagation.TextMapCarrier over a record's headers: Set
// replaces a header of the same key.
type Headers struct{ R *kgo.Record }

// Get returns the value of the first header key.
func (h Headers) Get(key string) string {
	for _, x := range h.R.Headers {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}

// Set sets header key to value, replacing the headers of that key.
func (h Headers) Set(key, value string) {
	hs := h.R.Headers[:0:0]
	for _, x := range h.R.Headers {
		if x.Key != key {
			hs = append(hs, x)
		}
	}
	h.R.Headers = append(hs, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys returns the header keys.
func (h Headers) Keys() []string {
	ks := make([]string, len(h.R.Headers))
	for i, x := range h.R.Headers {
		ks[i] = x.Key
	}
	return ks
}

// Extract returns ctx with the trace context of r's headers.
func (t *Tracer) Extract(ctx context.Context, r *kgo.Record) context.Context {
	return t.prop.Extract(ctx, Headers{r})
}

// Inject writes the trace context of ctx to r's headers.
func (t *Tracer) Inject(ctx context.Context, r *kgo.Record) { t.prop.Inject(ctx, Headers{r}) }

func (t *Tracer) start(ctx context.Context, op semconv.Operation, kind trace.SpanKind, r semconv.Record, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs := append(t.conv.Attrs(op, r), extra...)
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(attrs...)}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsRemote() {
		// The creation context of the record: the parent, and a link as the
		// conventions ask of consumer spans.
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return t.tr.Start(ctx, semconv.SpanName(op, r.Topic), opts...)
}

func (t *Tracer) end(s trace.Span, err error) {
	if err != nil {
		s.SetAttributes(attribute.String(semconv.ErrorType, errorType(err)))
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// errorType is error.type's value: the runtime's error class, low in
// cardinality as the conventions ask.
func errorType(err error) string { return processor.ErrorClass(err) }

// Attempt implements processor.Tracer: a "process <topic>" span, child of
// and linked to the record's send span (its headers' trace context).
func (t *Tracer) Attempt(ctx context.Context, group string, rec *kgo.Record, attempt int) (context.Context, func(error)) {
	ctx, s := t.start(t.Extract(ctx, rec), semconv.Process, trace.SpanKindConsumer,
		semconv.Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Group: group, Key: rec.Key},
		attribute.Int(semconv.Attempt, attempt))
	return ctx, func(err error) { t.end(s, err) }
}

// Batch implements processor.Tracer: a batch of one record is traced as
// its first attempt; a larger one is one "process <topic>" span (the first
// record's topic) linked to every record's send span, with
// messaging.batch.message_count, in a trace of its own, as the conventions
// describe batch processing.
func (t *Tracer) Batch(ctx context.Context, group string, recs []*kgo.Record) (context.Context, func(error)) {
	if len(recs) == 1 {
		return t.Attempt(ctx, group, recs[0], 1)
	}
	links := make([]trace.Link, 0, len(recs))
	for _, r := range recs {
		if sc := trace.SpanContextFromContext(t.Extract(context.Background(), r)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	topic := ""
	if len(recs) > 0 {
		topic = recs[0].Topic
	}
	ctx, s := t.tr.Start(ctx, semconv.SpanName(semconv.Process, topic), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(append(t.conv.Attrs(semconv.Process, semconv.Record{Topic: topic, Partition: -1, Offset: -1, Group: group}),
			attribute.Int(semconv.MessagingBatchMessageCount, len(recs)))...))
	return ctx, func(err error) { t.end(s, err) }
}

type forwardKey struct{}

// Forward implements processor.Tracer: a "send <target>" span, child of and
// linked to the record's send span, with a retry-topic-hop or dead-letter
// event; the producer hook puts its context in the forwarded record's
// headers instead of starting a span of its own.
func (t *Tracer) Forward(ctx context.Context, group string, rec *kgo.Record, target string, dlq bool, cause error) (context.Context, func(error)) {
	ctx, s := t.start(t.Extract(ctx, rec), semconv.Send, trace.SpanKindProducer,
		semconv.Record{Topic: target, Partition: -1, Offset: -1, Group: group, Key: rec.Key})
	ev := semconv.EventRetryTopicHop
	if dlq {
		ev = semconv.EventDeadLetter
	}
	s.AddEvent(ev, trace.WithAttributes(
		attribute.String(semconv.MessagingDestinationName, rec.Topic),
		attribute.String(semconv.MessagingDestinationPartitionID, strconv.Itoa(int(rec.Partition))),
		attribute.Int64(semconv.MessagingKafkaOffset, rec.Offset),
		attribute.String(semconv.ErrorClass, processor.ErrorClass(cause))))
	return context.WithValue(ctx, forwardKey{}, true), func(err error) { t.end(s, err) }
}

// Committed implements processor.Tracer: a "commit <topic>" span per topic
// of the commit, an event per partition with the offset committed.
func (t *Tracer) Committed(group string, offsets map[string]map[int32]int64, err error) {
	for topic, parts := range offsets {
		_, s := t.start(context.Background(), semconv.Commit, trace.SpanKindClient,
			semconv.Record{Topic: topic, Partition: -1, Offset: -1, Group: group})
		for p, off := range parts {
			s.AddEvent(semconv.EventCommit, trace.WithAttributes(
				attribute.String(semconv.MessagingDestinationPartitionID, strconv.Itoa(int(p))),
				attribute.Int64(semconv.MessagingKafkaOffset, off)))
		}
		t.end(s, err)
	}
}

// Outputs implements processor.Tracer: the transactional handler's records
// carry the context of its process span, for the producer hook.
func (t *Tracer) Outputs(hctx context.Context, outs []*kgo.Record) {
	for _, r := range outs {
		if r != nil {
			t.Inject(hctx, r)
		}
	}
}

// RecordOutputs implements processor.RecordOutputsTracer: the outputs of a
// record transformed in a batch (processor.TxnBatchHandler) join the
// record's own trace: when the batch's span (bctx) is in that trace (a
// batch of one record is that record's process span, as when it is
// transformed alone) they are its children, otherwise children of the
// record's send span (its headers' context). A record without a trace
// context gives its outputs the batch's.
func (t *Tracer) RecordOutputs(bctx context.Context, rec *kgo.Record, outs []*kgo.Record) {
	ctx := bctx
	if rc := t.Extract(context.Background(), rec); trace.SpanContextFromContext(rc).IsValid() &&
		trace.SpanContextFromContext(rc).TraceID() != trace.SpanContextFromContext(bctx).TraceID() {
		ctx = rc
	}
	for _, r := range outs {
		if r != nil {
			t.Inject(ctx, r)
		}
	}
}

// ClientHooks returns the franz-go hooks that trace a client's records: a
// send span per record produced (child of the span of the context it is
// produced with, or else of the trace context already in its headers), and
// a poll span per fetched batch, for consumer group group ("" for a
// producer-only client).
func (t *Tracer) ClientHooks(group string) kgo.Opt { return kgo.WithHooks(&hooks{t: t, group: group}) }

type hooks struct {
	t     *Tracer
	group string
}

type sendKey struct{}

var (
	_ kgo.HookProduceRecordBuffered   = (*hooks)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*hooks)(nil)
	_ kgo.HookFetchBatchRead          = (*hooks)(nil)
)

// OnProduceRecordBuffered starts the record's send span and writes its
// context to the record's headers.
func (h *hooks) OnProduceRecordBuffered(r *kgo.Record) {
	ctx := r.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Value(forwardKey{}) != nil {
		h.t.Inject(ctx, r) // a forward: its span is the send span
		return
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = h.t.Extract(ctx, r) // stored with the record: an outbox row, a transactional output
	}
	ctx, _ = h.t.start(ctx, semconv.Send, trace.SpanKindProducer,
		semconv.Record{Topic: r.Topic, Partition: -1, Offset: -1, Key: r.Key})
	h.t.Inject(ctx, r)
	r.Context = context.WithValue(ctx, sendKey{}, true)
}

// OnProduceRecordUnbuffered ends the send span with the partition and
// offset the record got, or its error.
func (h *hooks) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if r.Context == nil || r.Context.Value(sendKey{}) == nil {
		return
	}
	s := trace.SpanFromContext(r.Context)
	if err == nil {
		s.SetAttributes(attribute.String(semconv.MessagingDestinationPartitionID, strconv.Itoa(int(r.Partition))),
			attribute.Int64(semconv.MessagingKafkaOffset, r.Offset))
	}
	h.t.end(s, err)
}

// OnFetchBatchRead records a poll span for the batch.
func (h *hooks) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, partition int32, m kgo.FetchBatchMetrics) {
	_, s := h.t.start(context.Background(), semconv.Poll, trace.SpanKindClient,
		semconv.Record{Topic: topic, Partition: partition, Offset: -1, Group: h.group},
		attribute.Int(semconv.MessagingBatchMessageCount, m.NumRecords))
	s.End()
}

// TraceParent returns the W3C traceparent of the span of ctx, "" without
// one: what an outbox row stores so that its relay continues the trace.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// LogHandler wraps h so that a record logged with a context that has a span
// (slog's *Context methods) carries trace_id and span_id.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}
func (l logHandler) WithGroup(n string) slog.Handler { return logHandler{l.Handler.WithGroup(n)} }
