package payments_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/ordersystem/service/servicetest"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor/proctrace"
)

// TestOutboxRowsCarryTheTrace: the outbox rows payments writes store the
// W3C traceparent of the span the runtime gave the handler, so that the
// relay's paymentProcessed continues that trace: a record handled alone,
// its process span (in the order's trace); a batch, the batch's process
// span (a trace of its own, linked to each record's send span).
func TestOutboxRowsCarryTheTrace(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		addWallets(t, ctx, db, 100000, "c1", "c2")
		svc := &payments.Service{DB: db, Serde: serde}
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		tr := proctrace.New(proctrace.TracerProvider(tp))
		// sent returns the record of order id with the trace context of a
		// send span of its own trace in its headers.
		sent := func(id, cust string, off int64) (*kgo.Record, trace.SpanContext) {
			r := orderRec(t, serde, id, cust, 1000, off)
			sctx, s := tp.Tracer("test").Start(context.Background(), "send orderCreated", trace.WithSpanKind(trace.SpanKindProducer))
			tr.Inject(sctx, r)
			s.End()
			return r, s.SpanContext()
		}
		// rows are the outbox rows' trace_context, in id order.
		rows := func() []string {
			tcs, err := db.QueryStrings(ctx, `SELECT trace_context FROM outbox ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			return tcs
		}

		r0, send0 := sent("ord_a", "c1", 0)
		actx, done := tr.Attempt(ctx, "payments", r0, 1)
		err := svc.Handle(actx, r0)
		done(err)
		if err != nil {
			t.Fatal(err)
		}
		want := proctrace.TraceParent(actx)
		if got := rows(); len(got) != 1 || got[0] != want || !trace.SpanContextFromContext(actx).IsValid() ||
			trace.SpanContextFromContext(actx).TraceID() != send0.TraceID() {
			t.Errorf("a record alone: row's trace_context %q, want its process span's %q in the order's trace %v", got, want, send0.TraceID())
		}

		r1, send1 := sent("ord_b", "c2", 1)
		r2, send2 := sent("ord_c", "c1", 2)
		bctx, done := tr.Batch(ctx, "payments", []*kgo.Record{r1, r2})
		err = svc.HandleBatch(bctx, []*kgo.Record{r1, r2})
		done(err)
		if err != nil {
			t.Fatal(err)
		}
		batch := trace.SpanContextFromContext(bctx)
		want = proctrace.TraceParent(bctx)
		if got := rows(); len(got) != 3 || got[1] != want || got[2] != want || want == "" {
			t.Errorf("batch: rows' trace_context %q, want the batch span's %q for the last two", got, want)
		}
		var span sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			if s.SpanContext().SpanID() == batch.SpanID() {
				span = s
			}
		}
		if span == nil {
			t.Fatal("the batch span was not recorded")
		}
		linked := map[trace.SpanID]bool{}
		for _, l := range span.Links() {
			linked[l.SpanContext.SpanID()] = true
		}
		if !linked[send1.SpanID()] || !linked[send2.SpanID()] || len(span.Links()) != 2 {
			t.Errorf("batch span %s: links %v, want one to each record's send span", span.Name(), fmt.Sprint(span.Links()))
		}
	})
}
