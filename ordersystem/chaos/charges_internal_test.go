package chaos

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

// The wallet replay takes a batch transaction's payments in the order the
// batch applied them (payments.seq), not by a rule. On PostgreSQL the rows
// of one batch share one commit timestamp, and each of the replay's earlier
// rules fails one of the two cases: ordering by processed_at (the wall
// clock, which can step back) calls the correct refusal of the first case
// wrong; "debits before refusals" misses the wrong refusal of the second.
// Both cases' rows are written in one transaction, as a batch of the
// payments service leaves them (the second as a faulty one would).
func TestChargesReplayOrderWithinBatch(t *testing.T) {
	type pay struct {
		orderID     string
		amount      int64
		paid        bool  // debited, else refused for insufficient credit
		processedAt int64 // unix ms, as the payments service's clock read it
	}
	const cust, opening = "17850", 100000
	cases := []struct {
		name string
		rows []pay // in the order the batch applied them
		want string
	}{
		{name: "a correct refusal after a debit of its customer, the clock stepped back between them",
			rows: []pay{{"ord_a", 80000, true, 2000}, {"ord_b", 50000, false, 1999}}},
		{name: "a wrong refusal before a debit of its customer",
			rows: []pay{{"ord_b", 50000, false, 1000}, {"ord_a", 80000, true, 1001}},
			want: "order ord_b: refused for insufficient credit with 100000 left for 50000"},
	}
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if db.Dialect == store.Postgres {
			var on string
			if err := db.QueryRowContext(ctx, `SHOW track_commit_timestamp`).Scan(&on); err != nil {
				t.Fatal(err)
			}
			if on != "on" {
				t.Skip("the replay's commit order needs track_commit_timestamp = on (scripts/postgres.sh and the cluster run's reset set it)")
			}
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				for _, q := range []string{`DELETE FROM payments`, `DELETE FROM wallet_ledger`, `DELETE FROM orders`, `DELETE FROM wallets`} {
					if _, err := db.ExecContext(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO wallets (customer_id, opening_milli, balance_milli) VALUES (?, ?, ?)`), cust, opening, opening); err != nil {
					t.Fatal(err)
				}
				err := db.InTx(ctx, func(tx *sql.Tx) error {
					for _, p := range c.rows {
						if _, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO orders (order_id, customer_id, country, total_milli, line_count, reference, created_at, stored_at)
							VALUES (?, ?, 'United Kingdom', ?, 1, NULL, 1, 2)`), p.orderID, cust, p.amount); err != nil {
							return err
						}
						status, reason := order.PaymentRefused, payments.ReasonInsufficientCredit
						if p.paid {
							status, reason = order.PaymentPaid, ""
							if _, err := tx.ExecContext(ctx, db.Rebind(`UPDATE wallets SET balance_milli = balance_milli - ? WHERE customer_id = ?`), p.amount, cust); err != nil {
								return err
							}
							if _, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO wallet_ledger (customer_id, order_id, amount_milli, created_at) VALUES (?, ?, ?, ?)`),
								cust, p.orderID, -p.amount, p.processedAt); err != nil {
								return err
							}
						}
						if _, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO payments (order_id, customer_id, status, method, amount_milli, reason, processed_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
							p.orderID, cust, status, order.MethodWallet, p.amount, reason, p.processedAt); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				inv, err := (&checker{db: db}).charges(ctx)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case c.want == "" && !inv.OK:
					t.Fatalf("a correct batch called wrong: %s", inv.Detail)
				case c.want != "" && (inv.OK || inv.Violations != 1 || !strings.Contains(inv.Detail, c.want)):
					t.Fatalf("%d violations (%s), want 1: %q", inv.Violations, inv.Detail, c.want)
				}
			})
		}
	})
}
