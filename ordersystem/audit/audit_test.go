package audit

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

// TestReadProgressCountsAcceptedOrdersOnly: a payment (or notification,
// or shipment) of an order whose checkout row is not yet marked published
// is not counted, so the counts of one reading never exceed the orders
// accepted in it (without that rule a reading once showed 9,107 payments decided of 9,093 accepted).
func TestReadProgressCountsAcceptedOrdersOnly(t *testing.T) {
	ctx := context.Background()
	db := storetest.SQLite(t)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, db.Rebind(q), args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if p, err := ReadProgress(ctx, db); err != nil || p != (Progress{}) {
		t.Fatalf("progress of an empty database %+v, %v: want zeros", p, err)
	}
	type row struct{ id, status, pay, method string }
	for i, c := range []row{{"o1", "published", "PAID", "WALLET"}, {"o2", "published", "PAID", "WALLET"}, {"o3", "pending", "PAID", "WALLET"},
		{"o4", "published", "PAID", "CARD"}, {"o5", "published", "REFUSED", "WALLET"}, {"o6", "pending", "REFUSED", "WALLET"}} {
		exec(`INSERT INTO checkout_requests (idempotency_key, request_hash, order_id, event_id, status, created_at) VALUES (?, 'h', ?, ?, ?, 1)`,
			"k"+c.id, c.id, "e"+c.id, c.status)
		// Every order, o3 too, already went through every service: the
		// broker acknowledged o3's record, checkout has not marked it yet.
		exec(`INSERT INTO orders (order_id, total_milli, line_count, created_at, stored_at) VALUES (?, 1, 0, 1, 1)`, c.id)
		exec(`INSERT INTO payments (order_id, status, method, amount_milli, processed_at) VALUES (?, ?, ?, 1, 1)`, c.id, c.pay, c.method)
		exec(`INSERT INTO notifications (notification_id, order_id, kind, created_at) VALUES (?, ?, 'order_received', 1)`, "n"+c.id, c.id)
		exec(`INSERT INTO order_status (order_id, kind, at) VALUES (?, 'shipment_requested', ?)`, c.id, i)
	}
	p, err := ReadProgress(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	want := Progress{Accepted: 4, Stored: 4, Payments: 4, Paid: 3, Debited: 2, PaidByCard: 1, Refused: 1, Notifications: 4, ShipmentsRecorded: 4}
	if p != want {
		t.Errorf("progress %+v, want %+v (only the published orders' rows)", p, want)
	}
}

// TestPollIntervalBacksOffFromSlowReadings: a drain never polls a reading
// that took longer than its interval back to back.
func TestPollIntervalBacksOffFromSlowReadings(t *testing.T) {
	for _, c := range []struct{ min, took, want time.Duration }{
		{100 * time.Millisecond, 0, 100 * time.Millisecond},
		{100 * time.Millisecond, 30 * time.Millisecond, 100 * time.Millisecond},
		{100 * time.Millisecond, time.Second, 2 * time.Second},
	} {
		if got := PollInterval(c.min, c.took); got != c.want {
			t.Errorf("PollInterval(%v, %v) = %v, want %v", c.min, c.took, got, c.want)
		}
	}
}

// TestReadProgressDoesNotTakeTheWriteLock: on SQLite the reading is a
// snapshot that waits for no writer (its BEGIN is DEFERRED, not the DSN's
// IMMEDIATE), so a drain polling it never holds up the services' writes.
func TestReadProgressDoesNotTakeTheWriteLock(t *testing.T) {
	ctx := context.Background()
	db := storetest.SQLite(t)
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO checkout_requests (idempotency_key, request_hash, order_id, event_id, status, created_at) VALUES ('k', 'h', 'o', 'e', 'published', 1)`); err != nil {
				return err
			}
			close(holding)
			<-release // the write lock is held until then
			return nil
		})
	}()
	<-holding
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	p, err := ReadProgress(rctx, db)
	cancel()
	close(release)
	if err != nil {
		t.Fatalf("ReadProgress while a writer holds the lock: %v; want a snapshot read", err)
	}
	if p.Accepted != 0 {
		t.Errorf("read %d accepted orders of an uncommitted write", p.Accepted)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
