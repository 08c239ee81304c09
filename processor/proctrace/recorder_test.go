package proctrace_test

import (
	"context"
	"crypto/rand"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// recorder is a TracerProvider that records every span ended, for the tests
// to inspect, on the OpenTelemetry API alone (the runtime's tests do not
// depend on the OpenTelemetry SDK): each span gets random, sampled ids, is a
// child of the span context in its start context (unless trace.WithNewRoot)
// and keeps its kind, links, attributes (a key set again replaces its
// value, as the SDK does), events and status. Safe for concurrent use.
type recorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	ended []*span
}

func newRecorder() *recorder { return &recorder{} }

// Ended returns the spans ended so far, in the order they ended.
func (r *recorder) Ended() []*span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*span(nil), r.ended...)
}

func (r *recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return &tracer{r: r} }

type tracer struct {
	embedded.Tracer
	r *recorder
}

func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	var parent trace.SpanContext
	if !cfg.NewRoot() {
		parent = trace.SpanContextFromContext(ctx)
	}
	var sc trace.SpanContextConfig
	if parent.IsValid() {
		sc.TraceID = parent.TraceID()
	} else {
		_, _ = rand.Read(sc.TraceID[:])
	}
	_, _ = rand.Read(sc.SpanID[:])
	sc.TraceFlags = trace.FlagsSampled
	s := &span{r: t.r, name: name, kind: cfg.SpanKind(), sc: trace.NewSpanContext(sc), parent: parent,
		links: cfg.Links()}
	s.SetAttributes(cfg.Attributes()...)
	return trace.ContextWithSpan(ctx, s), s
}

// event is a span event: its name and attributes.
type event struct {
	Name       string
	Attributes []attribute.KeyValue
}

// status is a span's status.
type status struct {
	Code        codes.Code
	Description string
}

type span struct {
	embedded.Span
	r      *recorder
	mu     sync.Mutex
	name   string
	kind   trace.SpanKind
	sc     trace.SpanContext
	parent trace.SpanContext
	links  []trace.Link
	attrs  []attribute.KeyValue
	events []event
	status status
	done   bool
}

func (s *span) End(...trace.SpanEndOption) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done = true
	s.mu.Unlock()
	s.r.mu.Lock()
	s.r.ended = append(s.r.ended, s)
	s.r.mu.Unlock()
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, event{Name: name, Attributes: cfg.Attributes()})
}

func (s *span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.links = append(s.links, l)
}

func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.done
}

// RecordError adds an "exception" event, as the SDK does.
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	s.AddEvent("exception", append(opts, trace.WithAttributes(attribute.String("exception.message", err.Error())))...)
}

func (s *span) SpanContext() trace.SpanContext { return s.sc }

func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status{Code: code, Description: description}
}

func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.name = name
}

func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
next:
	for _, a := range kv {
		for i := range s.attrs {
			if s.attrs[i].Key == a.Key {
				s.attrs[i] = a
				continue next
			}
		}
		s.attrs = append(s.attrs, a)
	}
}

func (s *span) TracerProvider() trace.TracerProvider { return s.r }

// The accessors the tests read, named as the SDK's ReadOnlySpan names them.

func (s *span) Name() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.name }
func (s *span) SpanKind() trace.SpanKind  { return s.kind }
func (s *span) Parent() trace.SpanContext { return s.parent }
func (s *span) Links() []trace.Link       { s.mu.Lock(); defer s.mu.Unlock(); return s.links }
func (s *span) Events() []event           { s.mu.Lock(); defer s.mu.Unlock(); return s.events }
func (s *span) Status() status            { s.mu.Lock(); defer s.mu.Unlock(); return s.status }
func (s *span) Attributes() []attribute.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attribute.KeyValue(nil), s.attrs...)
}
