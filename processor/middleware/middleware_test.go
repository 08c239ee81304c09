package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/middleware"
)

var rec = &kgo.Record{Topic: "invoices", Partition: 2, Offset: 7, Key: []byte("c1"), Value: []byte(`{"cents": 5}`)}

// Chain applies the first middleware outermost.
func TestChainOrder(t *testing.T) {
	var order []string
	mark := func(name string) middleware.Middleware {
		return func(next processor.Handler) processor.Handler {
			return func(ctx context.Context, r *kgo.Record) error {
				order = append(order, name)
				return next(ctx, r)
			}
		}
	}
	h := middleware.Chain(func(context.Context, *kgo.Record) error { order = append(order, "h"); return nil }, mark("a"), mark("b"))
	if err := h(context.Background(), rec); err != nil || strings.Join(order, ",") != "a,b,h" {
		t.Fatalf("order %v, err %v; want a,b,h", order, err)
	}
}

// Recover makes a panic a permanent error carrying the value and the stack.
func TestRecover(t *testing.T) {
	h := middleware.Chain(func(context.Context, *kgo.Record) error { panic("boom") }, middleware.Recover())
	err := h(context.Background(), rec)
	var pe *processor.PanicError
	if !processor.IsPermanent(err) || !errors.As(err, &pe) || pe.Value != "boom" || !bytes.Contains(pe.Stack, []byte("middleware_test.go")) {
		t.Fatalf("err %v (panic error %+v): want a permanent PanicError with the stack", err, pe)
	}
	b := middleware.ChainBatch(func(context.Context, []*kgo.Record) error { panic("batch boom") }, middleware.RecoverBatch())
	if err := b(context.Background(), []*kgo.Record{rec}); !processor.IsPermanent(err) || !errors.As(err, &pe) {
		t.Fatalf("batch: %v", err)
	}
}

type invoice struct {
	Cents int64 `json:"cents"`
}

// Decode hands the typed value to the handler; a decode failure is
// permanent and the handler is not called.
func TestDecode(t *testing.T) {
	var got []int64
	h := middleware.Decode(middleware.JSON[invoice], func(_ context.Context, _ *kgo.Record, v invoice) error {
		got = append(got, v.Cents)
		return nil
	})
	if err := h(context.Background(), rec); err != nil || len(got) != 1 || got[0] != 5 {
		t.Fatalf("decoded %v, %v", got, err)
	}
	for _, v := range []string{"not json", ""} {
		bad := &kgo.Record{Topic: "invoices", Offset: 9, Value: []byte(v)}
		err := h(context.Background(), bad)
		if !processor.IsPermanent(err) || !strings.Contains(err.Error(), "invoices/0/9") {
			t.Fatalf("value %q: %v; want a permanent error naming the record", v, err)
		}
	}
	if len(got) != 1 {
		t.Fatal("the handler was called for an undecodable record")
	}
	b := middleware.DecodeBatch(middleware.JSON[invoice], func(_ context.Context, _ []*kgo.Record, vs []invoice) error {
		got = append(got, vs[0].Cents+vs[1].Cents)
		return nil
	})
	if err := b(context.Background(), []*kgo.Record{rec, rec}); err != nil || got[1] != 10 {
		t.Fatalf("batch decoded %v, %v", got, err)
	}
	if err := b(context.Background(), []*kgo.Record{rec, {Value: []byte("{")}}); !processor.IsPermanent(err) || len(got) != 2 {
		t.Fatalf("batch with an undecodable record: %v", err)
	}
}

// Log writes a failure at WARN with its class and the trace and span ids of
// the context's span, and a success at DEBUG.
func TestLog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fail := middleware.Chain(func(context.Context, *kgo.Record) error { return processor.Permanentf("rejected") }, middleware.Log(l))
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if err := fail(ctx, rec); !processor.IsPermanent(err) {
		t.Fatalf("Log changed the error: %v", err)
	}
	line := buf.String()
	for _, want := range []string{"level=WARN", `msg="handler failed"`, "topic=invoices", "partition=2", "offset=7", "key=c1",
		"error_class=permanent", "trace_id=" + sc.TraceID().String(), "span_id=" + sc.SpanID().String()} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}
	buf.Reset()
	ok := middleware.Chain(func(context.Context, *kgo.Record) error { return nil }, middleware.Log(l))
	if err := ok(context.Background(), rec); err != nil || !strings.Contains(buf.String(), "level=DEBUG msg=handled") || strings.Contains(buf.String(), "trace_id") {
		t.Fatalf("success logged %q (%v)", buf.String(), err)
	}
}

// Timing observes one sample per call under the topic and the outcome.
func TestTiming(t *testing.T) {
	reg := prometheus.NewRegistry()
	hist, err := middleware.NewTimingHistogram(reg, "billing", "handle_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := middleware.NewTimingHistogram(reg, "billing", "handle_seconds"); err == nil {
		t.Fatal("a second histogram of the same name: no error")
	}
	calls := 0
	h := middleware.Chain(func(context.Context, *kgo.Record) error {
		calls++
		if calls == 3 {
			return errors.New("flaky")
		}
		return nil
	}, middleware.Timing(hist))
	for range 3 {
		_ = h(context.Background(), rec)
	}
	if n := promtest.Sum(t, reg, "billing_handle_seconds", "topic", "invoices", "outcome", "ok"); n != 2 {
		t.Fatalf("ok samples %v, want 2", n)
	}
	if n := promtest.Sum(t, reg, "billing_handle_seconds", "topic", "invoices", "outcome", processor.ClassTransient); n != 1 {
		t.Fatalf("transient samples %v, want 1", n)
	}
}
