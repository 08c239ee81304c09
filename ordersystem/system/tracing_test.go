package system_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordercast/ordercast/internal/semconv"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// TestOneOrderOneTrace: with a TracerProvider, one order through every
// service is one trace: checkout's POST /orders span, then send orderCreated,
// its process spans in orders, payments and notifications, send
// paymentProcessed (the outbox relay, continuing the payment's trace from
// the outbox row), its process spans in notifications, orders and
// fulfillment, send shipmentRequested (fulfillment's transaction) and its
// process span in orders; each span's parent in the same trace and started
// before it, and the chain checkout -> payments -> relay -> fulfillment ->
// orders causal.
func TestOneOrderOneTrace(t *testing.T) {
	testkafka.Parallel(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	_, brokers := testkafka.Fake(t, nil)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	sys, err := system.Start(context.Background(), system.Config{
		Kafka:          system.KafkaConfig{Brokers: brokers, Layout: ops.Layout{Partitions: 2, ReplicationFactor: 1}},
		Schema:         system.SchemaConfig{RegistryURL: reg.URL()},
		DB:             system.DBConfig{DSN: "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")},
		HTTP:           system.HTTPConfig{Addr: "127.0.0.1:0"},
		SeedFile:       "../../data/online-retail/online_retail_2010-12-01.csv",
		OpeningCredit:  system.DefaultOpeningCredit,
		TracerProvider: tp,
		// One record per handler call, so that each record is a process
		// span of its order's trace: a group that fetches both of the
		// order's records at once (notifications, on a loaded machine)
		// would otherwise handle them as one batch span in a trace of its
		// own, as documented.
		Consumers: system.ConsumerConfig{MaxBatch: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	resp, err := http.Post("http://"+sys.HTTPAddr()+"/orders", "application/json",
		strings.NewReader(`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /orders: %d", resp.StatusCode)
	}

	// span name and group -> span, within the order's trace
	key := func(s sdktrace.ReadOnlySpan) string {
		for _, a := range s.Attributes() {
			if a.Key == semconv.MessagingConsumerGroupName && strings.HasPrefix(s.Name(), "process ") {
				return s.Name() + " @" + a.Value.AsString()
			}
		}
		return s.Name()
	}
	want := []string{
		"POST /orders", "send orderCreated",
		"process orderCreated @orders", "process orderCreated @payments", "process orderCreated @notifications",
		"send paymentProcessed",
		"process paymentProcessed @notifications", "process paymentProcessed @orders", "process paymentProcessed @fulfillment",
		"send shipmentRequested", "process shipmentRequested @orders",
	}
	var spans map[string]sdktrace.ReadOnlySpan
	var inTrace []sdktrace.ReadOnlySpan
	var root sdktrace.ReadOnlySpan
	deadline := time.Now().Add(60 * time.Second)
	for {
		spans, inTrace, root = map[string]sdktrace.ReadOnlySpan{}, nil, nil
		ended := sr.Ended()
		for _, s := range ended {
			if s.Name() == "POST /orders" {
				root = s
			}
		}
		if root != nil {
			for _, s := range ended {
				if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
					inTrace = append(inTrace, s)
					if _, dup := spans[key(s)]; !dup {
						spans[key(s)] = s
					}
				}
			}
		}
		var missing []string
		for _, w := range want {
			if spans[w] == nil {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var have []string
			for _, s := range inTrace {
				have = append(have, key(s))
			}
			var all []string
			for _, s := range sr.Ended() {
				if s.SpanContext().TraceID() != root.SpanContext().TraceID() && !strings.HasPrefix(s.Name(), "poll ") && !strings.HasPrefix(s.Name(), "commit ") {
					all = append(all, key(s)+" "+s.Status().Description)
				}
			}
			t.Fatalf("the order's trace lacks %q; it has %q; other traces: %q", missing, have, all)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if root.SpanKind() != trace.SpanKindServer || root.Parent().IsValid() {
		t.Errorf("POST /orders: kind %v, parent %v; want the trace's root, a server span", root.SpanKind(), root.Parent())
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range inTrace {
		byID[s.SpanContext().SpanID()] = s
	}
	for _, s := range inTrace {
		if s == root {
			continue
		}
		p := byID[s.Parent().SpanID()]
		if p == nil {
			t.Errorf("%s: parent %v not in the trace", key(s), s.Parent().SpanID())
			continue
		}
		if s.StartTime().Before(p.StartTime()) {
			t.Errorf("%s started %v before its parent %s", key(s), p.StartTime().Sub(s.StartTime()), key(p))
		}
	}
	// The causal chain, from the last span up to the root.
	var chain []string
	for s := spans["process shipmentRequested @orders"]; s != nil; s = byID[s.Parent().SpanID()] {
		chain = append([]string{key(s)}, chain...)
	}
	pos := func(name string) int {
		for i, c := range chain {
			if c == name {
				return i
			}
		}
		return -1
	}
	last := -1
	for _, w := range []string{"POST /orders", "send orderCreated", "process orderCreated @payments", "send paymentProcessed",
		"process paymentProcessed @fulfillment", "send shipmentRequested", "process shipmentRequested @orders"} {
		if i := pos(w); i <= last {
			t.Fatalf("ancestors of the last span: %q; want %s after position %d", chain, w, last)
		} else {
			last = i
		}
	}
	t.Logf("the order's trace: %d spans; the chain: %s", len(inTrace), strings.Join(chain, " -> "))
	for _, s := range inTrace {
		if s.SpanKind() == trace.SpanKindUnspecified {
			t.Errorf("%s: no span kind", fmt.Sprint(key(s)))
		}
	}
}
