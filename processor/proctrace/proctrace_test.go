package proctrace_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordercast/ordercast/internal/semconv"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/proctrace"
)

func attr(s *span, k string) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func str(s *span, k string) string { v, _ := attr(s, k); return v.Emit() }

// TestProcessorSpans: a record produced under a span gets a send span whose
// context is in its headers; each handler attempt is a process span, child
// of and linked to that send span, with its attempt number and the
// conventions' attributes (error.type on the failed one); a record the
// handler refuses goes to the DLQ in a send span with a dead-letter event,
// the DLQ record keeping the trace; commits are commit spans with an event
// per partition.
func TestProcessorSpans(t *testing.T) {
	testkafka.Parallel(t)
	tp := newRecorder()
	tr := proctrace.New(proctrace.TracerProvider(tp))
	brokers := testkafka.Cluster(t, map[string]int32{"in": 1, "g.dlq": 1})

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), tr.ClientHooks(""))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, root := tp.Tracer("test").Start(context.Background(), "checkout")
	for _, k := range []string{"flaky", "bad"} {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	root.End()

	var mu sync.Mutex
	tries := map[string]int{}
	var logs strings.Builder
	log := slog.New(proctrace.LogHandler(slog.NewTextHandler(&logs, nil)))
	handler := func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		defer mu.Unlock()
		log.InfoContext(ctx, "handling", "key", string(r.Key))
		tries[string(r.Key)]++
		if string(r.Key) == "bad" {
			return processor.Permanentf("refused")
		}
		if tries[string(r.Key)] == 1 {
			return errors.New("flaky")
		}
		return nil
	}
	p, err := processor.New(processor.Brokers(brokers...), processor.Group("g"), processor.Topics("in"),
		processor.WithHandler(handler), processor.MaxAttempts(3), processor.Backoff(time.Millisecond, 5*time.Millisecond),
		processor.CommitInterval(50*time.Millisecond),
		processor.Tracing(tr), processor.ClientOpts(tr.ClientHooks("g")))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	defer stop()

	dlq := testkafka.ReadN(t, brokers, "g.dlq", 1, 30*time.Second, false)
	testkafka.WaitFor(t, 30*time.Second, "a commit span past both records", func() bool {
		for _, s := range tp.Ended() {
			if s.Name() == "commit in" {
				for _, e := range s.Events() {
					for _, a := range e.Attributes {
						if a.Key == semconv.MessagingKafkaOffset && a.Value.AsInt64() == 2 {
							return true
						}
					}
				}
			}
		}
		return false
	})
	stop()

	trace0 := root.SpanContext().TraceID()
	var sends, process, forwards, polls, commits []*span
	for _, s := range tp.Ended() {
		switch {
		case s.Name() == "send in":
			sends = append(sends, s)
		case s.Name() == "process in":
			process = append(process, s)
		case s.Name() == "send g.dlq":
			forwards = append(forwards, s)
		case s.Name() == "poll in":
			polls = append(polls, s)
		case s.Name() == "commit in":
			commits = append(commits, s)
		}
	}
	if len(sends) != 2 || len(process) != 3 || len(forwards) != 1 || len(polls) == 0 || len(commits) == 0 {
		t.Fatalf("spans: %d send in, %d process in, %d send g.dlq, %d poll, %d commit; want 2, 3 (2 attempts of flaky, 1 of bad), 1, some, some",
			len(sends), len(process), len(forwards), len(polls), len(commits))
	}
	sendOf := map[string]*span{}
	for _, s := range sends {
		if s.SpanKind() != trace.SpanKindProducer || s.SpanContext().TraceID() != trace0 || s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s: kind %v, trace %v parent %v; want a producer span child of the root", s.Name(), s.SpanKind(), s.SpanContext().TraceID(), s.Parent().SpanID())
		}
		for k, want := range map[string]string{semconv.MessagingSystem: "kafka", semconv.MessagingOperationName: "send",
			semconv.MessagingOperationType: "send", semconv.MessagingDestinationName: "in", semconv.MessagingDestinationPartitionID: "0"} {
			if got := str(s, k); got != want {
				t.Errorf("%s: %s = %q; want %q", s.Name(), k, got, want)
			}
		}
		sendOf[str(s, semconv.MessagingKafkaMessageKey)] = s
	}
	attempts := map[string][]int64{}
	for _, s := range process {
		key := str(s, semconv.MessagingKafkaMessageKey)
		send := sendOf[key]
		if send == nil {
			t.Fatalf("process span of key %q: no send span", key)
		}
		if s.SpanKind() != trace.SpanKindConsumer || s.Parent().SpanID() != send.SpanContext().SpanID() || s.SpanContext().TraceID() != trace0 {
			t.Errorf("process %s: kind %v parent %v; want a consumer span child of its send span %v", key, s.SpanKind(), s.Parent().SpanID(), send.SpanContext().SpanID())
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
			t.Errorf("process %s: links %v; want one to its send span", key, s.Links())
		}
		for k, want := range map[string]string{semconv.MessagingOperationName: "process", semconv.MessagingOperationType: "process",
			semconv.MessagingConsumerGroupName: "g", semconv.MessagingDestinationPartitionID: "0"} {
			if got := str(s, k); got != want {
				t.Errorf("process %s: %s = %q; want %q", key, k, got, want)
			}
		}
		if v, ok := attr(s, semconv.MessagingDestinationPartitionID); !ok || v.Type() != attribute.STRING {
			t.Errorf("process %s: partition id %v; want a string", key, v)
		}
		if _, ok := attr(s, semconv.MessagingKafkaOffset); !ok {
			t.Errorf("process %s: no offset", key)
		}
		n, _ := attr(s, semconv.Attempt)
		attempts[key] = append(attempts[key], n.AsInt64())
		if et := str(s, semconv.ErrorType); (key == "flaky" && n.AsInt64() == 1 && et != processor.ClassTransient) || (key == "bad" && et != processor.ClassPermanent) || (key == "flaky" && n.AsInt64() == 2 && et != "") {
			t.Errorf("process %s attempt %d: error.type %q", key, n.AsInt64(), et)
		}
	}
	if got := attempts["flaky"]; len(got) != 2 || got[0]+got[1] != 3 {
		t.Errorf("attempts of flaky: %v; want 1 and 2", got)
	}
	f := forwards[0]
	if f.SpanKind() != trace.SpanKindProducer || f.SpanContext().TraceID() != trace0 || f.Parent().SpanID() != sendOf["bad"].SpanContext().SpanID() ||
		len(f.Events()) != 1 || f.Events()[0].Name != semconv.EventDeadLetter {
		t.Errorf("DLQ send span: kind %v parent %v events %v; want a producer child of bad's send span with a dead-letter event", f.SpanKind(), f.Parent().SpanID(), f.Events())
	}
	if tp := (proctrace.Headers{R: dlq[0]}).Get("traceparent"); !strings.Contains(tp, trace0.String()) || !strings.Contains(tp, f.SpanContext().SpanID().String()) {
		t.Errorf("DLQ record's traceparent %q; want trace %v, span %v (the DLQ send span)", tp, trace0, f.SpanContext().SpanID())
	}
	c := commits[0]
	if c.SpanKind() != trace.SpanKindClient || str(c, semconv.MessagingOperationType) != "settle" || str(c, semconv.MessagingConsumerGroupName) != "g" {
		t.Errorf("commit span: kind %v, attributes %v", c.SpanKind(), c.Attributes())
	}
	if !strings.Contains(logs.String(), "trace_id="+trace0.String()) || !strings.Contains(logs.String(), "span_id=") {
		t.Errorf("handler logs without the trace: %s", logs.String())
	}
}

// TestSemconvOptIn: OTEL_SEMCONV_STABILITY_OPT_IN=messaging/dup adds the
// experimental names; messaging and no value give the current ones only.
func TestSemconvOptIn(t *testing.T) {
	r := semconv.Record{Topic: "in", Partition: 3, Offset: 7, Group: "g"}
	for v, old := range map[string]bool{"": false, "messaging": false, "http,messaging/dup": true} {
		names := map[string]bool{}
		for _, a := range semconv.Parse(v).Attrs(semconv.Process, r) {
			names[string(a.Key)] = true
		}
		if !names[semconv.MessagingDestinationPartitionID] || names[semconv.OldMessagingKafkaPartition] != old || names[semconv.OldMessagingOperation] != old {
			t.Errorf("%q: %v; want the current names, the old ones %v", v, names, old)
		}
	}
}

// TestTxnProcessorSpans: the exactly-once processor traces like the plain
// one: each transaction that commits is a "commit <topic>" span (CLIENT,
// settle) with the offset after its records, each record a process span,
// its output's send span a child of it, and a record dead-lettered inside
// the transaction a "send <group>.dlq" span (PRODUCER, a dead-letter event)
// child of the record's send span, whose context the DLQ record carries.
func TestTxnProcessorSpans(t *testing.T) {
	testkafka.Parallel(t)
	tp := newRecorder()
	tr := proctrace.New(proctrace.TracerProvider(tp))
	brokers := testkafka.Cluster(t, map[string]int32{"in": 1, "out": 1, "g.dlq": 1})

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), tr.ClientHooks(""))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, root := tp.Tracer("test").Start(context.Background(), "checkout")
	for _, k := range []string{"good", "bad"} {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	root.End()

	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if string(r.Key) == "bad" {
			return nil, processor.Permanentf("refused")
		}
		return []*kgo.Record{{Topic: "out", Key: r.Key, Value: r.Value}}, nil
	}
	p, err := processor.NewTransactional("txn-trace", h, processor.Brokers(brokers...), processor.Group("g"), processor.Topics("in"),
		processor.CommitInterval(20*time.Millisecond), processor.Tracing(tr), processor.ClientOpts(tr.ClientHooks("g")))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	defer stop()

	dlq := testkafka.ReadN(t, brokers, "g.dlq", 1, 30*time.Second, true)
	testkafka.WaitFor(t, 30*time.Second, "a commit span past both records", func() bool {
		for _, s := range tp.Ended() {
			if s.Name() == "commit in" {
				for _, e := range s.Events() {
					for _, a := range e.Attributes {
						if a.Key == semconv.MessagingKafkaOffset && a.Value.AsInt64() == 2 {
							return true
						}
					}
				}
			}
		}
		return false
	})
	stop()

	trace0 := root.SpanContext().TraceID()
	byName := map[string][]*span{}
	for _, s := range tp.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	sendOf := map[string]*span{}
	for _, s := range byName["send in"] {
		sendOf[str(s, semconv.MessagingKafkaMessageKey)] = s
	}
	if len(sendOf) != 2 || len(byName["send g.dlq"]) != 1 || len(byName["send out"]) != 1 {
		t.Fatalf("spans: %d send in, %d send g.dlq, %d send out; want 2, 1, 1", len(sendOf), len(byName["send g.dlq"]), len(byName["send out"]))
	}
	f := byName["send g.dlq"][0]
	if f.SpanKind() != trace.SpanKindProducer || f.SpanContext().TraceID() != trace0 || f.Parent().SpanID() != sendOf["bad"].SpanContext().SpanID() ||
		len(f.Events()) != 1 || f.Events()[0].Name != semconv.EventDeadLetter || str(f, semconv.MessagingConsumerGroupName) != "g" {
		t.Errorf("DLQ send span: kind %v parent %v events %v attributes %v; want a producer child of bad's send span with a dead-letter event",
			f.SpanKind(), f.Parent().SpanID(), f.Events(), f.Attributes())
	}
	if tp := (proctrace.Headers{R: dlq[0]}).Get("traceparent"); !strings.Contains(tp, trace0.String()) || !strings.Contains(tp, f.SpanContext().SpanID().String()) {
		t.Errorf("DLQ record's traceparent %q; want trace %v, span %v (the DLQ send span)", tp, trace0, f.SpanContext().SpanID())
	}
	out := byName["send out"][0]
	var goodProcess *span
	for _, s := range byName["process in"] {
		if str(s, semconv.MessagingKafkaMessageKey) == "good" {
			goodProcess = s
		}
	}
	if goodProcess == nil || out.Parent().SpanID() != goodProcess.SpanContext().SpanID() || out.SpanContext().TraceID() != trace0 {
		t.Errorf("send out: parent %v; want good's process span", out.Parent().SpanID())
	}
	var commit *span
	for _, s := range byName["commit in"] {
		commit = s
	}
	if commit.SpanKind() != trace.SpanKindClient || str(commit, semconv.MessagingOperationType) != "settle" ||
		str(commit, semconv.MessagingConsumerGroupName) != "g" || commit.Status().Code != codes.Unset || commit.SpanContext().TraceID() == trace0 {
		t.Errorf("commit span: kind %v, status %v, attributes %v; want a client settle span of group g, in a trace of its own",
			commit.SpanKind(), commit.Status(), commit.Attributes())
	}
}

// TestTxnBatchOutputsKeepTheirTrace: outputs of records transformed together
// by a TxnBatchHandler each join their own input's trace (RecordOutputs),
// not the batch's: one trace per input, batched or not.
func TestTxnBatchOutputsKeepTheirTrace(t *testing.T) {
	testkafka.Parallel(t)
	tp := newRecorder()
	tr := proctrace.New(proctrace.TracerProvider(tp))
	brokers := testkafka.Cluster(t, map[string]int32{"in": 1, "out": 1, "g.dlq": 1})
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), tr.ClientHooks(""))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 4
	traceOf := map[string]trace.TraceID{}
	for i := range n {
		ctx, root := tp.Tracer("test").Start(context.Background(), "checkout")
		k := fmt.Sprintf("k%d", i)
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		root.End()
		traceOf[k] = root.SpanContext().TraceID()
	}
	var largest atomic.Int64
	bh := func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
		largest.Store(max(largest.Load(), int64(len(recs))))
		outs := make([][]*kgo.Record, len(recs))
		for i, r := range recs {
			outs[i] = []*kgo.Record{{Topic: "out", Key: r.Key, Value: r.Value}}
		}
		return outs, nil
	}
	h := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: "out", Key: r.Key, Value: r.Value}}, nil
	}
	p, err := processor.NewTransactional("txn-batch-trace", h, processor.Brokers(brokers...), processor.Group("g"), processor.Topics("in"),
		processor.WithTxnBatchHandler(bh), processor.CommitInterval(20*time.Millisecond), processor.Tracing(tr), processor.ClientOpts(tr.ClientHooks("g")))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, p)
	out := testkafka.ReadN(t, brokers, "out", n, 30*time.Second, true)
	stop()
	if largest.Load() < 2 {
		t.Fatalf("largest batch %d records: the records were not transformed together", largest.Load())
	}
	for _, r := range out {
		tpHeader := (proctrace.Headers{R: r}).Get("traceparent")
		if want := traceOf[string(r.Key)]; !strings.Contains(tpHeader, want.String()) {
			t.Errorf("output of %s: traceparent %q, want its input's trace %v", r.Key, tpHeader, want)
		}
	}
}
