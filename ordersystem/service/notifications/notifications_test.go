package notifications_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/promtest"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/service/notifications"
	"github.com/ordercast/ordercast/ordersystem/service/servicetest"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

func created(t *testing.T, serde *schema.Serde, id, cust string, off int64) *kgo.Record {
	t.Helper()
	return createdAs(t, serde, "evt_c_"+id, id, cust, off)
}

func createdAs(t *testing.T, serde *schema.Serde, eventID, id, cust string, off int64) *kgo.Record {
	t.Helper()
	ev := order.OrderCreated{EventID: eventID, Order: order.Order{
		OrderID: id, CustomerID: cust, Country: "United Kingdom", CreatedAt: time.UnixMilli(1700000000000).UTC(),
		Lines: []order.Line{{StockCode: "85123A", Quantity: 1, UnitPrice: 1000, LineTotal: 1000}}, Total: 1000,
	}}
	return schematest.Record(t, serde, order.TopicOrderCreated, order.KeyFor(cust, id), off, &ev)
}

func paid(t *testing.T, serde *schema.Serde, id, cust, status string, off int64) *kgo.Record {
	t.Helper()
	ev := order.PaymentProcessed{EventID: "evt_p_" + id, OrderID: id, CustomerID: cust, Status: status, Method: order.MethodWallet,
		Amount: 1000, ProcessedAt: time.UnixMilli(1700000000000).UTC()}
	if status == order.PaymentRefused {
		ev.Reason = "insufficient_credit"
	}
	return schematest.Record(t, serde, order.TopicPaymentProcessed, ev.Key(), off, &ev)
}

// rows lists the notifications table (without created_at), by id, with
// <NULL> for a NULL customer id.
func rows(t *testing.T, ctx context.Context, db *store.DB) []string {
	t.Helper()
	rs, err := db.QueryContext(ctx, `SELECT notification_id, order_id, kind, COALESCE(customer_id, '<NULL>'), body FROM notifications ORDER BY notification_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var id, o, k, c, b string
		if err := rs.Scan(&id, &o, &k, &c, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, id+" "+o+" "+k+" "+c+" "+b)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// HandleBatch writes one notification per (order, kind), the rows Handle
// writes one record at a time (a guest's customer id NULL), whatever the
// redeliveries: of an event earlier in the batch, of one an earlier batch
// applied, and of another event of an order and kind already notified.
func TestHandleBatchEquivalentToHandle(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, batchDB *store.DB, serde *schema.Serde) {
		oneDB := storetest.Another(t, batchDB)
		first := []*kgo.Record{created(t, serde, "o1", "c1", 0), created(t, serde, "o2", "", 1)}
		second := []*kgo.Record{
			created(t, serde, "o3", "c1", 2), first[0], paid(t, serde, "o1", "c1", order.PaymentPaid, 3),
			created(t, serde, "o3", "c1", 2), paid(t, serde, "o2", "", order.PaymentPaid, 4),
			paid(t, serde, "o3", "c1", order.PaymentRefused, 5),
		}
		// Another event (its own id) of an order already notified, in the
		// batch twice: the notification exists, both are duplicates.
		again := createdAs(t, serde, "evt_c_o1_again", "o1", "c1", 6)
		second = append(second, again, again)
		batchReg, oneReg := prometheus.NewRegistry(), prometheus.NewRegistry()
		batch := &notifications.Service{DB: batchDB, Serde: serde, Metrics: service.NewMetrics(batchReg)}
		for _, recs := range [][]*kgo.Record{first, second} {
			if err := batch.HandleBatch(ctx, recs); err != nil {
				t.Fatal(err)
			}
		}
		one := &notifications.Service{DB: oneDB, Serde: serde, Metrics: service.NewMetrics(oneReg)}
		for _, r := range slices.Concat(first, second) {
			if err := one.Handle(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		// The redeliveries: o1's received again (first[0]), o3's created
		// twice in the batch, and the other event of o1's received twice.
		for name, reg := range map[string]*prometheus.Registry{"HandleBatch": batchReg, "Handle": oneReg} {
			if d := promtest.Sum(t, reg, "ordercast_inbox_duplicates_total", "group", order.GroupNotifications); d != 4 {
				t.Errorf("%s counted %v duplicates, want 4", name, d)
			}
		}
		// Notifications deduplicate themselves: no inbox rows.
		for _, db := range []*store.DB{batchDB, oneDB} {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d inbox rows (%v), want none", n, err)
			}
		}
		got, want := rows(t, ctx, batchDB), rows(t, ctx, oneDB)
		if len(got) != 6 || !slices.Equal(got, want) {
			t.Fatalf("HandleBatch wrote\n%q\nHandle wrote\n%q\n(want 6 rows: o1-o3 received, o1 and o2 confirmed, o3 failed)", got, want)
		}
		guest := notifications.NotificationID("o2", notifications.KindOrderReceived) + " o2 order_received <NULL> "
		if !slices.ContainsFunc(got, func(r string) bool { return strings.HasPrefix(r, guest) }) {
			t.Fatalf("the guest's notification has a customer id: %q", got)
		}
	})
}
