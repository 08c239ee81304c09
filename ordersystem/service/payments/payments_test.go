package payments_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/ordersystem/service/servicetest"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/processor"
)

// A second orderCreated for an already charged order under a new event id
// is refused at once as permanent (naming the order and the conflict), and
// charges nothing; a plain redelivery is skipped.
func TestConflictingOrderCreatedIsPermanent(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		addWallets(t, ctx, db, 100000, "17850")
		svc := &payments.Service{DB: db, Serde: serde}
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
		err := svc.Handle(ctx, rec("evt_second", 2))
		if err == nil || !processor.IsPermanent(err) {
			t.Fatalf("conflicting event: err %v, want a permanent error", err)
		}
		for _, want := range []string{"ord_dup", "already exists", "evt_second"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		var balance int64
		if err := db.QueryRowContext(ctx, db.Rebind(`SELECT balance_milli FROM wallets WHERE customer_id = ?`), "17850").Scan(&balance); err != nil {
			t.Fatal(err)
		}
		if balance != 100000-5100 {
			t.Errorf("balance %d, want %d: charged other than once", balance, 100000-5100)
		}
	})
}

// addWallets opens a wallet of balance (thousandths of GBP) for each
// customer.
func addWallets(t *testing.T, ctx context.Context, db *store.DB, balance int64, customers ...string) {
	t.Helper()
	for _, c := range customers {
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO wallets (customer_id, opening_milli, balance_milli) VALUES (?, ?, ?)`), c, balance, balance); err != nil {
			t.Fatal(err)
		}
	}
}
