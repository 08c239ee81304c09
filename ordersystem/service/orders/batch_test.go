package orders_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/service/orders"
	"github.com/ordercast/ordercast/ordersystem/service/servicetest"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// HandleBatch stores several orders and statuses in one transaction, each
// once (a redelivery in the batch is skipped), every line of an order with
// more lines than one INSERT takes, in line order; a batch holding a record
// of an unknown topic keeps nothing.
func TestHandleBatch(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		svc := &orders.Service{DB: db, Serde: serde}
		now := time.Now().UTC().Truncate(time.Millisecond)
		created := func(i, lines int, off int64) *kgo.Record {
			ev := order.OrderCreated{EventID: fmt.Sprintf("evt_%d", i), Order: order.Order{OrderID: fmt.Sprintf("ord_%d", i), CustomerID: "17850", CreatedAt: now}}
			for l := range lines {
				ev.Lines = append(ev.Lines, order.Line{StockCode: fmt.Sprintf("S%d", l), Quantity: 1, UnitPrice: 1000, LineTotal: 1000})
				ev.Total += 1000
			}
			return schematest.Record(t, serde, order.TopicOrderCreated, ev.OrderID, off, &ev)
		}
		paid := func(i int, off int64) *kgo.Record {
			ev := order.PaymentProcessed{EventID: fmt.Sprintf("evt_pay_%d", i), OrderID: fmt.Sprintf("ord_%d", i), Status: order.PaymentPaid,
				Method: order.MethodCard, Amount: 1000, Country: "United Kingdom", ProcessedAt: now}
			return schematest.Record(t, serde, order.TopicPaymentProcessed, ev.OrderID, off, &ev)
		}
		const many = 1201 // three INSERTs of lines
		if err := svc.HandleBatch(ctx, []*kgo.Record{created(1, 2, 0), created(2, many, 1), paid(1, 0), created(1, 2, 2)}); err != nil {
			t.Fatal(err)
		}
		if err := svc.HandleBatch(ctx, []*kgo.Record{created(3, 1, 3), {Topic: "elsewhere", Value: []byte("x")}}); err == nil {
			t.Fatal("a batch with a record of an unknown topic succeeded")
		}
		count := func(q string, args ...any) int {
			var n int
			if err := db.QueryRowContext(ctx, db.Rebind(q), args...).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(`SELECT COUNT(*) FROM orders`); n != 2 {
			t.Fatalf("%d orders, want 2 (ord_1 once, ord_2; ord_3's batch failed)", n)
		}
		if n := count(`SELECT COUNT(*) FROM order_lines WHERE order_id = ?`, "ord_2"); n != many {
			t.Fatalf("ord_2 has %d lines, want %d", n, many)
		}
		if n := count(`SELECT COUNT(*) FROM order_lines WHERE order_id = ? AND stock_code = 'S' || CAST(line_no - 1 AS TEXT)`, "ord_2"); n != many {
			t.Fatalf("%d of ord_2's lines have the stock code of their line number, want %d", n, many)
		}
		if n := count(`SELECT COUNT(*) FROM orders WHERE order_id = ? AND line_count = ? AND total_milli = ? AND customer_id = '17850' AND channel IS NULL`, "ord_2", many, many*1000); n != 1 {
			t.Fatalf("ord_2's row does not hold its line count %d, total and customer", many)
		}
		if n := count(`SELECT COUNT(*) FROM order_lines WHERE quantity = 1 AND unit_price_milli = 1000 AND line_total_milli = 1000`); n != many+2 {
			t.Fatalf("%d lines hold their quantity, price and total, want %d", n, many+2)
		}
		if n := count(`SELECT COUNT(*) FROM order_status WHERE order_id = ?`, "ord_1"); n != 2 {
			t.Fatalf("ord_1 has %d statuses, want 2 (created, paid)", n)
		}
		if n := count(`SELECT COUNT(*) FROM inbox WHERE event_id = ?`, "evt_3"); n != 0 {
			t.Fatal("the failed batch kept an inbox row")
		}
	})
}

// An order's later statuses deduplicate themselves by (order_id, kind): a
// redelivered paymentProcessed or shipmentRequested, in the same batch, in a
// later one or handled alone, and another event of a milestone the order
// has (its own event id), is skipped and counted as a duplicate, the status
// written once, with no inbox row; orderCreated keeps its inbox row.
func TestStatusesDeduplicateThemselves(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		reg := prometheus.NewRegistry()
		svc := &orders.Service{DB: db, Serde: serde, Metrics: service.NewMetrics(reg)}
		now := time.Now().UTC().Truncate(time.Millisecond)
		created := order.OrderCreated{EventID: "evt_c1", Order: order.Order{OrderID: "ord_1", CustomerID: "17850", CreatedAt: now,
			Lines: []order.Line{{StockCode: "S", Quantity: 1, UnitPrice: 1000, LineTotal: 1000}}, Total: 1000}}
		paid := func(eventID string, off int64) *kgo.Record {
			ev := order.PaymentProcessed{EventID: eventID, OrderID: "ord_1", Status: order.PaymentPaid,
				Method: order.MethodCard, Amount: 1000, Country: "United Kingdom", ProcessedAt: now}
			return schematest.Record(t, serde, order.TopicPaymentProcessed, ev.OrderID, off, &ev)
		}
		shipped := order.ShipmentRequested{EventID: "evt_s1", OrderID: "ord_1", ShipmentID: "shp_1", RequestedAt: now}
		shipRec := schematest.Record(t, serde, order.TopicShipmentRequested, "ord_1", 0, &shipped)
		// Duplicates: 1 in the first batch (evt_p1 twice), all 3 of the
		// second, and the 2 handled alone after them.
		batches := [][]*kgo.Record{
			{schematest.Record(t, serde, order.TopicOrderCreated, "ord_1", 0, &created), paid("evt_p1", 0), paid("evt_p1", 0), shipRec},
			{paid("evt_p1", 0), paid("evt_p1_other", 1), shipRec},
		}
		for _, b := range batches {
			if err := svc.HandleBatch(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range []*kgo.Record{paid("evt_p1", 0), shipRec} {
			if err := svc.Handle(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if d := promtest.Sum(t, reg, "ordercast_inbox_duplicates_total", "group", order.GroupOrders); d != 6 {
			t.Errorf("%v duplicates counted, want 6", d)
		}
		count := func(q string) int {
			var n int
			if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(`SELECT COUNT(*) FROM order_status WHERE order_id = 'ord_1'`); n != 3 {
			t.Errorf("%d statuses, want 3 (created, paid, shipment_requested)", n)
		}
		if n := count(`SELECT COUNT(*) FROM inbox WHERE consumer_group = 'orders' AND topic = 'orderCreated'`); n != 1 {
			t.Errorf("%d inbox rows of orderCreated, want 1", n)
		}
		if n := count(`SELECT COUNT(*) FROM inbox WHERE topic <> 'orderCreated'`); n != 0 {
			t.Errorf("%d inbox rows of statuses, want none", n)
		}
	})
}
