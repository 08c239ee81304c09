package payments_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/schema/schematest"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/ordersystem/service/servicetest"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

// orderRec returns the orderCreated record of order id (event evt_<id>) for
// cust ("" for a guest) of total (thousandths of GBP).
func orderRec(t *testing.T, serde *schema.Serde, id, cust string, total int64, off int64) *kgo.Record {
	t.Helper()
	ev := order.OrderCreated{EventID: "evt_" + id, Order: order.Order{
		OrderID: id, CustomerID: cust, Country: "United Kingdom", CreatedAt: time.UnixMilli(1700000000000).UTC(),
		Lines: []order.Line{{StockCode: "85123A", Quantity: 1, UnitPrice: order.Money(total), LineTotal: order.Money(total)}}, Total: order.Money(total),
	}}
	return schematest.Record(t, serde, order.TopicOrderCreated, order.KeyFor(cust, id), off, &ev)
}

// state is what the payments service wrote, without generated event ids and
// timestamps: wallets by customer, the ledger and the outbox in id order,
// the payments in seq order.
type state struct {
	wallets, ledger, payments, outbox []string
}

func dump(t *testing.T, ctx context.Context, db *store.DB, serde *schema.Serde) state {
	t.Helper()
	rows := func(q string, scan func(scan func(...any) error) string) []string {
		t.Helper()
		r, err := db.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []string
		for r.Next() {
			out = append(out, scan(r.Scan))
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	var st state
	st.wallets = rows(`SELECT customer_id, balance_milli FROM wallets ORDER BY customer_id`, func(scan func(...any) error) string {
		var c string
		var b int64
		if err := scan(&c, &b); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s=%d", c, b)
	})
	st.ledger = rows(`SELECT customer_id, order_id, amount_milli FROM wallet_ledger ORDER BY id`, func(scan func(...any) error) string {
		var c, o string
		var a int64
		if err := scan(&c, &o, &a); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s %s %d", c, o, a)
	})
	st.payments = rows(`SELECT order_id, COALESCE(customer_id, '-'), status, method, amount_milli, COALESCE(reason, '') FROM payments ORDER BY seq`, func(scan func(...any) error) string {
		var o, c, s, m, r string
		var a int64
		if err := scan(&o, &c, &s, &m, &a, &r); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s %s %s %s %d %s", o, c, s, m, a, r)
	})
	st.outbox = rows(`SELECT topic, record_key, value FROM outbox ORDER BY id`, func(scan func(...any) error) string {
		var topic string
		var key, value []byte
		if err := scan(&topic, &key, &value); err != nil {
			t.Fatal(err)
		}
		var p order.PaymentProcessed
		if err := service.Decode(ctx, serde, &kgo.Record{Topic: topic, Value: value}, &p); err != nil {
			t.Fatalf("outbox row of %s: %v", topic, err)
		}
		if !strings.HasPrefix(p.EventID, "evt_") || p.ProcessedAt.IsZero() {
			t.Fatalf("outbox event %+v without an event id or a time", p)
		}
		p.EventID, p.ProcessedAt = "", time.Time{}
		return fmt.Sprintf("%s %s %+v", topic, key, p)
	})
	return st
}

// sortedByCustomer returns recs stably sorted by customer id (the order
// HandleBatch decides them in).
func sortedByCustomer(t *testing.T, serde *schema.Serde, recs []*kgo.Record) []*kgo.Record {
	t.Helper()
	cust := func(r *kgo.Record) string {
		var ev order.OrderCreated
		if _, err := serde.Decode(r.Topic, r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		return ev.CustomerID
	}
	out := slices.Clone(recs)
	sort.SliceStable(out, func(a, b int) bool { return cust(out[a]) < cust(out[b]) })
	return out
}

// Random batches (seeded) of orders of customers with wallets, without one,
// and guests, with redeliveries of earlier events in the same and in later
// batches, leave the same wallets, ledger, payments (in seq order) and
// outbox rows whether applied by HandleBatch or by Handle one record at a
// time in the order HandleBatch decides them (the runtime's fallback).
func TestHandleBatchEquivalentToHandle(t *testing.T) {
	servicetest.Each(t, func(t *testing.T, ctx context.Context, batchDB *store.DB, serde *schema.Serde) {
		oneDB := storetest.Another(t, batchDB)
		for seed := uint64(1); seed <= 3; seed++ {
			rng := rand.New(rand.NewPCG(seed, 11))
			customers := []string{"c0", "c1", "c2", "c3", "c4", "nowallet", ""}
			for _, db := range []*store.DB{batchDB, oneDB} {
				for _, q := range []string{`DELETE FROM wallets`, `DELETE FROM wallet_ledger`, `DELETE FROM payments`, `DELETE FROM outbox`, `DELETE FROM inbox`} {
					if _, err := db.ExecContext(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
			}
			r2 := rand.New(rand.NewPCG(seed, 12))
			for _, c := range customers[:5] {
				b := r2.Int64N(12000)
				addWallets(t, ctx, batchDB, b, c)
				addWallets(t, ctx, oneDB, b, c)
			}
			bSvc := &payments.Service{DB: batchDB, Serde: serde}
			oSvc := &payments.Service{DB: oneDB, Serde: serde}
			var seen []*kgo.Record
			off := int64(0)
			for b := range 25 {
				var batch []*kgo.Record
				for range 1 + rng.IntN(15) {
					if len(seen) > 0 && rng.IntN(5) == 0 {
						batch = append(batch, seen[rng.IntN(len(seen))]) // a redelivery
						continue
					}
					id := fmt.Sprintf("ord_%d_%d", seed, off)
					r := orderRec(t, serde, id, customers[rng.IntN(len(customers))], 100+rng.Int64N(3000), off)
					off++
					seen = append(seen, r)
					batch = append(batch, r)
				}
				if err := bSvc.HandleBatch(ctx, batch); err != nil {
					t.Fatalf("seed %d batch %d: %v", seed, b, err)
				}
				for _, r := range sortedByCustomer(t, serde, batch) {
					if err := oSvc.Handle(ctx, r); err != nil {
						t.Fatalf("seed %d batch %d: Handle: %v", seed, b, err)
					}
				}
			}
			got, want := dump(t, ctx, batchDB, serde), dump(t, ctx, oneDB, serde)
			for _, c := range []struct {
				name      string
				got, want []string
			}{{"wallets", got.wallets, want.wallets}, {"ledger", got.ledger, want.ledger}, {"payments", got.payments, want.payments}, {"outbox", got.outbox, want.outbox}} {
				if !slices.Equal(c.got, c.want) {
					t.Errorf("seed %d: %s differ:\nHandleBatch: %q\nHandle:      %q", seed, c.name, c.got, c.want)
				}
			}
			var paid, short, none, card int
			for _, p := range got.payments {
				switch {
				case strings.Contains(p, payments.ReasonInsufficientCredit):
					short++
				case strings.Contains(p, payments.ReasonNoWallet):
					none++
				case strings.Contains(p, order.MethodCard):
					card++
				default:
					paid++
				}
			}
			if paid == 0 || short == 0 || none == 0 || card == 0 || len(got.payments) != int(off) {
				t.Fatalf("seed %d: %d payments of %d orders (%d wallet, %d short, %d no wallet, %d card): the run does not cover every case",
					seed, len(got.payments), off, paid, short, none, card)
			}
		}
	})
}
