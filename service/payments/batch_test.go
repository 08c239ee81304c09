package payments_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/order"
	"github.com/ordercast/ordercast/schema"
	"github.com/ordercast/ordercast/schema/schematest"
	"github.com/ordercast/ordercast/service/payments"
	"github.com/ordercast/ordercast/service/servicetest"
	"github.com/ordercast/ordercast/store"
)

// HandleBatch applies several orders in one transaction: each debit and
// outbox row once, a redelivery in the batch or of an earlier batch skipped,
// each payment numbered (payments.seq) in the order the batch applied it,
// and a batch holding a bad record keeps nothing (the runtime then handles
// the records one at a time).
func TestHandleBatch(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		addWallets(t, ctx, db, 100000, "c1", "c2")
		svc := &payments.Service{DB: db, Serde: serde}
		createdAt := time.Now().UTC().Truncate(time.Millisecond)
		rec := func(i int, cust string, off int64) *kgo.Record {
			ev := order.OrderCreated{EventID: fmt.Sprintf("evt_%d", i), Order: order.Order{
				OrderID: fmt.Sprintf("ord_%d", i), CustomerID: cust, CreatedAt: createdAt,
				Lines: []order.Line{{StockCode: "85123A", Quantity: 1, UnitPrice: 1000, LineTotal: 1000}}, Total: 1000,
			}}
			return schematest.Record(t, serde, order.TopicOrderCreated, ev.OrderID, off, &ev)
		}
		if err := svc.HandleBatch(ctx, []*kgo.Record{rec(1, "c2", 0), rec(2, "c1", 1), rec(3, "c2", 2), rec(1, "c2", 3), rec(4, "", 4)}); err != nil {
			t.Fatal(err)
		}
		if err := svc.HandleBatch(ctx, []*kgo.Record{rec(2, "c1", 5), rec(5, "c1", 6)}); err != nil {
			t.Fatalf("batch with a redelivery: %v", err)
		}
		bad := &kgo.Record{Topic: order.TopicOrderCreated, Offset: 8, Key: []byte("x"), Value: []byte("not an event")}
		if err := svc.HandleBatch(ctx, []*kgo.Record{rec(6, "c1", 7), bad}); err == nil {
			t.Fatal("a batch with an undecodable record succeeded")
		}
		balance := func(c string) int64 {
			var b int64
			if err := db.QueryRowContext(ctx, db.Rebind(`SELECT balance_milli FROM wallets WHERE customer_id = ?`), c).Scan(&b); err != nil {
				t.Fatal(err)
			}
			return b
		}
		if b1, b2 := balance("c1"), balance("c2"); b1 != 100000-2000 || b2 != 100000-2000 {
			t.Fatalf("balances c1 %d c2 %d, want %d each (two orders each, once)", b1, b2, 100000-2000)
		}
		count := func(q string) int {
			var n int
			if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(`SELECT COUNT(*) FROM payments`); n != 5 {
			t.Fatalf("%d payments, want 5 (orders 1-5 once each)", n)
		}
		// payments.seq numbers the rows in the order the batches applied
		// them: sorted by customer id (the guest first), offset order within.
		ids, err := db.QueryStrings(ctx, `SELECT order_id FROM payments ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(ids, ","); got != "ord_4,ord_2,ord_1,ord_3,ord_5" {
			t.Fatalf("payments by seq %s, want ord_4,ord_2,ord_1,ord_3,ord_5 (the order applied)", got)
		}
		if n := count(`SELECT COUNT(*) FROM outbox`); n != 5 {
			t.Fatalf("%d outbox rows, want 5", n)
		}
		if n := count(`SELECT COUNT(*) FROM inbox WHERE event_id = 'evt_6'`); n != 0 {
			t.Fatal("the failed batch kept an inbox row")
		}
	})
}
