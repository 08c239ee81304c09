package processortest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/processortest"
)

// The kit end to end: records produced are consumed back, a processor run
// on it commits them all, and Run's stop returns.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kc := processortest.New(t, map[string]int32{"in": 2, "g.dlq": 2})
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))})
	}
	if err := kc.Produce(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	got, err := kc.Consume(ctx, "in", 10)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, r := range got {
		vals = append(vals, string(r.Value))
	}
	slices.Sort(vals)
	if fmt.Sprint(vals) != "[0 1 2 3 4 5 6 7 8 9]" {
		t.Fatalf("consumed %v", vals)
	}
	if offs, err := kc.Committed(ctx, "g", "in"); err != nil || len(offs) != 0 {
		t.Fatalf("committed before any group: %v %v", offs, err)
	}
	p, err := processor.New(processor.Brokers(kc.Brokers()...), processor.Group("g"), processor.Topics("in"),
		processor.CommitInterval(10*time.Millisecond),
		processor.WithHandler(func(context.Context, *kgo.Record) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop := processortest.Run(t, p)
	if err := kc.WaitCommitted(ctx, "g", "in", 10); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := kc.CreateTopic(ctx, "later", 1); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if recs, err := kc.Consume(short, "later", 1); err == nil || len(recs) != 0 {
		t.Fatalf("Consume of an empty topic: %d records, %v; want the context's error", len(recs), err)
	}
}

// A record produced once under a context that has since ended is produced
// again under the new call's context (franz-go keeps the first call's
// context in Record.Context).
func TestProduceAgainAfterContextEnded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kc := processortest.New(t, map[string]int32{"in": 1})
	rec := &kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte("v")}
	first, cancelFirst := context.WithCancel(ctx)
	if err := kc.Produce(first, rec); err != nil {
		t.Fatal(err)
	}
	cancelFirst()
	if err := kc.Produce(ctx, rec); err != nil {
		t.Fatalf("second Produce of the same record: %v", err)
	}
	got, err := kc.Consume(ctx, "in", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Offset != 1 {
		t.Fatalf("consumed %d records, want 2", len(got))
	}
}
