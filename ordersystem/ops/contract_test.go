package ops_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service/orders"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
)

// TestContractViolationsDeadLettered sends four records that break the
// orderCreated contract, then a valid order, on one partition, through the
// real orders and payments services on the runtime: each bad record ends in
// each group's DLQ with the right ordercast-error-class, and the valid order
// behind them is processed by both (the partition moved on).
func TestContractViolationsDeadLettered(t *testing.T) {
	ctx := context.Background()
	topics := map[string]int32{}
	for _, s := range ops.SystemTopics(ops.Layout{Partitions: 2, ReplicationFactor: 1}) {
		topics[s.Name] = s.Partitions
	}
	addrs, adm := testCluster(t, topics)

	serde := schematest.Serde(t, schematest.Client(t))
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ordercast.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	for group, h := range map[string]processor.Handler{
		order.GroupOrders:   (&orders.Service{DB: db, Serde: serde}).Handle,
		order.GroupPayments: (&payments.Service{DB: db, Serde: serde}).Handle,
	} {
		tops := orders.Topics
		if group == order.GroupPayments {
			tops = payments.Topics
		}
		runProcessor(t, processor.Brokers(addrs...), processor.Group(group), processor.Topics(tops...),
			processor.WithHandler(h), processor.CommitInterval(20*time.Millisecond))
	}

	ev := order.OrderCreated{EventID: "evt_good", Order: order.Order{
		OrderID: "ord_good", CustomerID: "12345", Country: "France", CreatedAt: time.Date(2010, 12, 1, 8, 26, 0, 0, time.UTC),
		Lines: []order.Line{{StockCode: "85123A", Description: "WHITE HANGING HEART T-LIGHT HOLDER", Quantity: 6, UnitPrice: 2550, LineTotal: 15300}},
		Total: 15300,
	}}
	good, err := serde.Encode(order.TopicOrderCreated, &ev)
	if err != nil {
		t.Fatal(err)
	}
	// A JSON payload without the required orderId.
	var doc map[string]any
	bad := ev
	bad.EventID, bad.OrderID = "evt_json", "ord_json"
	b, _ := json.Marshal(bad)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "orderId")
	missingField, _ := json.Marshal(doc)
	// Avro with a schema id the registry does not know.
	unknownID := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(unknownID[1:5], 999_999)
	// A valid event of another topic: its schema id is registered under
	// paymentProcessed-value, not orderCreated-value.
	otherSubject, err := serde.Encode(order.TopicPaymentProcessed, &order.PaymentProcessed{EventID: "evt_pay", OrderID: "ord_x",
		Status: order.PaymentPaid, Method: order.MethodCard, Amount: 1000, ProcessedAt: time.Now().UTC().Truncate(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{ // original offset -> class
		0: schema.ClassUndecodable,
		1: schema.ClassInvalid,
		2: schema.ClassUnknownSchemaID,
		3: schema.ClassWrongSubject,
	}
	produce(t, addrs,
		&kgo.Record{Topic: order.TopicOrderCreated, Partition: 0, Key: []byte("12345"), Value: []byte{0xde, 0xad, 0xbe, 0xef}},
		&kgo.Record{Topic: order.TopicOrderCreated, Partition: 0, Key: []byte("12345"), Value: missingField},
		&kgo.Record{Topic: order.TopicOrderCreated, Partition: 0, Key: []byte("12345"), Value: unknownID},
		&kgo.Record{Topic: order.TopicOrderCreated, Partition: 0, Key: []byte("12345"), Value: otherSubject},
		&kgo.Record{Topic: order.TopicOrderCreated, Partition: 0, Key: []byte("12345"), Value: good},
	)

	// The valid order behind the four bad records is processed by both.
	waitFor(t, 15*time.Second, "the valid order stored and its payment decided", func() bool {
		var n, m int
		_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders WHERE order_id = 'ord_good'`).Scan(&n)
		_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM payments WHERE order_id = 'ord_good'`).Scan(&m)
		return n == 1 && m == 1
	})
	for _, group := range []string{order.GroupOrders, order.GroupPayments} {
		d, err := ops.NewDLQ(group, kgo.SeedBrokers(addrs...))
		if err != nil {
			t.Fatal(err)
		}
		var l *ops.Listing
		waitFor(t, 10*time.Second, group+" DLQ holding the four records", func() bool {
			l, err = d.List(ctx, ops.Selection{}, 0)
			return err == nil && l.Selected == 4
		})
		d.Close()
		for _, r := range l.Records {
			header := ""
			for _, h := range r.Headers {
				if h.Key == processor.HeaderErrorClass {
					header = h.Value
				}
			}
			if r.OriginalTopic != order.TopicOrderCreated || r.OriginalPartition != 0 || header != want[r.OriginalOffset] || r.ConsumerGroup != group {
				t.Errorf("%s: %s: original %s/%d/%d, %s=%q, want class %q (error %s)", group, r.ID, r.OriginalTopic, r.OriginalPartition,
					r.OriginalOffset, processor.HeaderErrorClass, header, want[r.OriginalOffset], r.ErrorMessage)
			}
		}
		for _, class := range want {
			if l.ByClass[class] != 1 {
				t.Errorf("%s: %d records of class %s, want 1 (by class: %v)", group, l.ByClass[class], class, l.ByClass)
			}
		}
	}
	// Both groups committed past the five records: the partition moved on.
	waitFor(t, 10*time.Second, "both groups committed offset 5 on orderCreated/0", func() bool {
		gs, err := ops.DescribeGroups(ctx, adm, order.GroupOrders, order.GroupPayments)
		if err != nil {
			return false
		}
		for _, g := range gs {
			ok := false
			for _, p := range g.Partitions {
				ok = ok || (p.Topic == order.TopicOrderCreated && p.Partition == 0 && p.Committed == 5 && p.Lag == 0)
			}
			if !ok {
				return false
			}
		}
		return true
	})
}
