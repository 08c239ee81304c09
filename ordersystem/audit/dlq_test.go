package audit_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/audit"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/processor"
)

// TestCountDLQLeavesPurgedOut: the reports' dlqRecords agree with
// `ordercast dlq list`: after a purge of two of three records, one is
// counted, as List counts it.
func TestCountDLQLeavesPurgedOut(t *testing.T) {
	ctx := context.Background()
	topics := map[string]int32{}
	for _, g := range order.Groups {
		topics[processor.DLQTopic(g)] = 1
	}
	addrs := testkafka.Cluster(t, topics)
	dlq := processor.DLQTopic(order.GroupOrders)
	var recs []*kgo.Record
	for _, k := range []string{"a", "b", "c"} {
		recs = append(recs, &kgo.Record{Topic: dlq, Key: []byte(k), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: processor.HeaderOriginalTopic, Value: []byte(order.TopicOrderCreated)}, {Key: processor.HeaderErrorClass, Value: []byte("invalid")}}})
	}
	testkafka.Produce(t, addrs, recs...)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	count := func() int {
		t.Helper()
		n, err := audit.CountDLQ(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		for g, c := range n {
			if g != order.GroupOrders && c != 0 {
				t.Errorf("CountDLQ %v: group %s has no records", n, g)
			}
		}
		return n[order.GroupOrders]
	}
	if n := count(); n != 3 {
		t.Fatalf("before the purge: %d records counted, want 3", n)
	}
	d, err := ops.NewDLQ(order.GroupOrders, kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Purge(ctx, ops.PurgeOptions{Partitions: []int32{0}, Until: 2}); err != nil {
		t.Fatal(err)
	}
	l, err := d.List(ctx, ops.Selection{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 || n != l.Selected {
		t.Errorf("after purging 2 of 3: CountDLQ %d, dlq list %d; want 1 both", n, l.Selected)
	}
}
