package orders_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service/orders"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
	"github.com/ordercast/ordercast/processor"
)

// The orders service stores orderCreated's channel when the event has one
// and its Serde reads it: NULL for v1 records, and for any record read by an
// instance pinned to v1 (the old build of a rolling upgrade).
func TestStoresChannel(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl := schematest.Client(t)
		cur := schematest.Serde(t, cl)
		old := schematest.Serde(t, cl, schema.WithVersion(order.TopicOrderCreated, 1))
		newSvc := &orders.Service{DB: db, Serde: cur}
		oldSvc := &orders.Service{DB: db, Serde: old}
		cases := []struct {
			id     string
			writer *schema.Serde
			reader *orders.Service
			want   sql.NullString
		}{
			{"ord_v2_new", cur, newSvc, sql.NullString{String: "web", Valid: true}},
			{"ord_v1_new", old, newSvc, sql.NullString{}},
			{"ord_v2_old", cur, oldSvc, sql.NullString{}},
			{"ord_v1_old", old, oldSvc, sql.NullString{}},
		}
		for i, c := range cases {
			ev := order.OrderCreated{EventID: "evt_" + c.id, Order: order.Order{
				OrderID: c.id, CustomerID: "17850", Channel: "web", CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
				Lines: []order.Line{{StockCode: "85123A", Quantity: 2, UnitPrice: 2550, LineTotal: 5100}}, Total: 5100,
			}}
			b, err := c.writer.Encode(order.TopicOrderCreated, &ev)
			if err != nil {
				t.Fatal(err)
			}
			r := &kgo.Record{Topic: order.TopicOrderCreated, Partition: 0, Offset: int64(i), Key: []byte("17850"), Value: b}
			if err := c.reader.Handle(ctx, r); err != nil {
				t.Fatalf("%s: Handle: %v", c.id, err)
			}
			var got sql.NullString
			if err := db.QueryRowContext(ctx, db.Rebind(`SELECT channel FROM orders WHERE order_id = ?`), c.id).Scan(&got); err != nil {
				t.Fatalf("%s: %v", c.id, err)
			}
			if got != c.want {
				t.Errorf("%s: channel %v, want %v", c.id, got, c.want)
			}
		}
	})
}

// newSerde returns a Serde on a fake registry closed when the test ends.
func newSerde(t *testing.T, ctx context.Context) *schema.Serde {
	t.Helper()
	return schematest.Serde(t, nil)
}

// A second orderCreated for a stored order under a new event id is a
// contract violation: a permanent error on the first attempt naming the
// order and the conflict, not a transient UNIQUE failure retried into the
// DLQ. A redelivery of the first event stays a skipped duplicate.
func TestConflictingOrderCreatedIsPermanent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		serde := newSerde(t, ctx)
		var logs bytes.Buffer
		svc := &orders.Service{DB: db, Serde: serde,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		createdAt := time.Now().UTC().Truncate(time.Millisecond) // one event, the same bytes on redelivery
		rec := func(eventID string, off int64) *kgo.Record {
			ev := order.OrderCreated{EventID: eventID, Order: order.Order{
				OrderID: "ord_dup", CustomerID: "17850", CreatedAt: createdAt,
				Lines: []order.Line{{StockCode: "85123A", Quantity: 2, UnitPrice: 2550, LineTotal: 5100}}, Total: 5100,
			}}
			return schematest.Record(t, serde, order.TopicOrderCreated, "17850", off, &ev)
		}
		if err := svc.Handle(ctx, rec("evt_first", 0)); err != nil {
			t.Fatal(err)
		}
		if err := svc.Handle(ctx, rec("evt_first", 1)); err != nil {
			t.Fatalf("redelivery: %v", err)
		}
		if !strings.Contains(logs.String(), "duplicate event skipped") || !strings.Contains(logs.String(), "evt_first") {
			t.Errorf("duplicate not logged at debug with its event id: %q", logs.String())
		}
		// The same event id with other content is a reused id, not a
		// redelivery: dead-lettered as permanent, the order untouched.
		altered := order.OrderCreated{EventID: "evt_first", Order: order.Order{
			OrderID: "ord_dup", CustomerID: "17850", CreatedAt: createdAt,
			Lines: []order.Line{{StockCode: "85123A", Quantity: 3, UnitPrice: 2550, LineTotal: 7650}}, Total: 7650,
		}}
		err := svc.Handle(ctx, schematest.Record(t, serde, order.TopicOrderCreated, "17850", 3, &altered))
		if !processor.IsPermanent(err) || !strings.Contains(err.Error(), "evt_first was already applied") || !strings.Contains(err.Error(), "orderCreated/0/0") {
			t.Fatalf("same event id, other content: err %v; want a permanent conflict naming the first record", err)
		}
		var total int64
		if err := db.QueryRowContext(ctx, `SELECT total_milli FROM orders WHERE order_id = 'ord_dup'`).Scan(&total); err != nil || total != 5100 {
			t.Fatalf("stored total %d, %v; want the first event's 5100", total, err)
		}
		err = svc.Handle(ctx, rec("evt_second", 2))
		if err == nil || !processor.IsPermanent(err) {
			t.Fatalf("conflicting event: err %v, want a permanent error", err)
		}
		if got := processor.ErrorClass(err); got != processor.ClassPermanent {
			t.Errorf("class %q, want %q", got, processor.ClassPermanent)
		}
		for _, want := range []string{"ord_dup", "already exists", "evt_second"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	})
}
