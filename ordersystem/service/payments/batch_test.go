package payments_test

import (
	"context"
	"fmt"
	"slices"
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

// A customer several times in one batch: each debit sees the balance the
// earlier ones left, so once the credit runs out the later orders are
// refused (insufficient_credit, no debit), and a later order that the rest
// still covers is paid; other customers' orders in between do not disturb
// it.
func TestHandleBatchCreditRunsOut(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		addWallets(t, ctx, db, 2500, "c1")
		addWallets(t, ctx, db, 5000, "c2")
		svc := &payments.Service{DB: db, Serde: serde}
		batch := []*kgo.Record{
			orderRec(t, serde, "o1", "c1", 1000, 0), orderRec(t, serde, "o2", "c2", 1000, 1),
			orderRec(t, serde, "o3", "c1", 1000, 2), orderRec(t, serde, "o4", "c1", 1000, 3),
			orderRec(t, serde, "o5", "c2", 1000, 4), orderRec(t, serde, "o6", "c1", 400, 5),
			orderRec(t, serde, "o7", "c1", 200, 6),
		}
		if err := svc.HandleBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
		st := dump(t, ctx, db, serde)
		want := state{
			wallets: []string{"c1=100", "c2=3000"},
			ledger:  []string{"c1 o1 -1000", "c1 o3 -1000", "c1 o6 -400", "c2 o2 -1000", "c2 o5 -1000"},
			payments: []string{
				"o1 c1 PAID WALLET 1000 ", "o3 c1 PAID WALLET 1000 ", "o4 c1 REFUSED WALLET 1000 insufficient_credit",
				"o6 c1 PAID WALLET 400 ", "o7 c1 REFUSED WALLET 200 insufficient_credit", "o2 c2 PAID WALLET 1000 ", "o5 c2 PAID WALLET 1000 ",
			},
		}
		checkState(t, st, want)
		if len(st.outbox) != 7 || !strings.Contains(st.outbox[2], "OrderID:o4") || !strings.Contains(st.outbox[2], "Reason:insufficient_credit") {
			t.Errorf("outbox %q: want the 7 paymentProcessed events in the decided order, the third o4's refusal", st.outbox)
		}
	})
}

// A customer without a wallet is refused (no_wallet) and a guest pays by
// card, neither debited, in the same batch as a wallet payment.
func TestHandleBatchNoWalletAndGuest(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		addWallets(t, ctx, db, 5000, "c1")
		svc := &payments.Service{DB: db, Serde: serde}
		batch := []*kgo.Record{orderRec(t, serde, "o1", "ghost", 1000, 0), orderRec(t, serde, "o2", "", 900, 1), orderRec(t, serde, "o3", "c1", 800, 2)}
		if err := svc.HandleBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
		st := dump(t, ctx, db, serde)
		checkState(t, st, state{
			wallets:  []string{"c1=4200"},
			ledger:   []string{"c1 o3 -800"},
			payments: []string{"o2 - PAID CARD 900 ", "o3 c1 PAID WALLET 800 ", "o1 ghost REFUSED WALLET 1000 no_wallet"},
		})
		if len(st.outbox) != 3 || !strings.Contains(st.outbox[0], "o2 {") || !strings.Contains(st.outbox[0], "Method:CARD") ||
			!strings.Contains(st.outbox[2], "Reason:no_wallet") {
			t.Errorf("outbox %q: want the guest's card payment (keyed by its order) first and the no_wallet refusal last", st.outbox)
		}
	})
}

// Events already in the inbox (from an earlier batch or a one-by-one
// Handle) and repeated within the batch are skipped: charged, recorded and
// announced once.
func TestHandleBatchSkipsInboxDuplicates(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		addWallets(t, ctx, db, 10000, "c1")
		svc := &payments.Service{DB: db, Serde: serde}
		o1, o2, o3 := orderRec(t, serde, "o1", "c1", 1000, 0), orderRec(t, serde, "o2", "c1", 1000, 1), orderRec(t, serde, "o3", "c1", 1000, 2)
		if err := svc.HandleBatch(ctx, []*kgo.Record{o1}); err != nil {
			t.Fatal(err)
		}
		if err := svc.Handle(ctx, o2); err != nil {
			t.Fatal(err)
		}
		if err := svc.HandleBatch(ctx, []*kgo.Record{o2, o1, o3, o1, o3}); err != nil {
			t.Fatal(err)
		}
		st := dump(t, ctx, db, serde)
		checkState(t, st, state{
			wallets:  []string{"c1=7000"},
			ledger:   []string{"c1 o1 -1000", "c1 o2 -1000", "c1 o3 -1000"},
			payments: []string{"o1 c1 PAID WALLET 1000 ", "o2 c1 PAID WALLET 1000 ", "o3 c1 PAID WALLET 1000 "},
		})
		if len(st.outbox) != 3 {
			t.Errorf("%d outbox rows, want 3 (one per order)", len(st.outbox))
		}
	})
}

// An order already paid under another event id fails the batch with a
// permanent error that names the conflict, and the batch keeps nothing.
func TestHandleBatchConflictIsPermanent(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) {
		addWallets(t, ctx, db, 10000, "c1")
		svc := &payments.Service{DB: db, Serde: serde}
		if err := svc.HandleBatch(ctx, []*kgo.Record{orderRec(t, serde, "o1", "c1", 1000, 0)}); err != nil {
			t.Fatal(err)
		}
		var ev order.OrderCreated
		again := orderRec(t, serde, "o1", "c1", 1000, 1)
		if _, err := serde.Decode(again.Topic, again.Value, &ev); err != nil {
			t.Fatal(err)
		}
		ev.EventID = "evt_other"
		again = schematest.Record(t, serde, order.TopicOrderCreated, "c1", 1, &ev)
		for _, batch := range [][]*kgo.Record{{again}, {orderRec(t, serde, "o2", "c1", 1000, 2), again}} {
			err := svc.HandleBatch(ctx, batch)
			if err == nil || !processor.IsPermanent(err) || !strings.Contains(err.Error(), "o1") || !strings.Contains(err.Error(), "evt_other") {
				t.Fatalf("batch of %d with a conflicting event: err %v, want a permanent error naming o1 and evt_other", len(batch), err)
			}
		}
		checkState(t, dump(t, ctx, db, serde), state{
			wallets:  []string{"c1=9000"},
			ledger:   []string{"c1 o1 -1000"},
			payments: []string{"o1 c1 PAID WALLET 1000 "},
		})
	})
}

// checkState compares st's wallets, ledger and payments with want's.
func checkState(t *testing.T, st, want state) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want []string
	}{{"wallets", st.wallets, want.wallets}, {"ledger", st.ledger, want.ledger}, {"payments", st.payments, want.payments}} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, c.got, c.want)
		}
	}
}
